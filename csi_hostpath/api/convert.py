"""proto ⇄ model, and the request-shape checks that come before anything else happens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from google.protobuf import timestamp_pb2

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.conditions import Problem
from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.core.model import (
    AccessMode,
    AccessType,
    Capability,
    ContentSource,
    Snapshot,
    TopologyRequirement,
    Volume,
)


def capability(cap: pb.VolumeCapability, what: str = "volume_capability") -> Capability:
    kind = cap.WhichOneof("access_type")
    if kind is None:
        raise InvalidRequest(f"{what}: access_type (mount or block) is required")
    mode_value = cap.access_mode.mode
    if mode_value not in AccessMode._value2member_map_:
        raise InvalidRequest(f"{what}: unknown access mode {mode_value}")
    mode = AccessMode(mode_value)
    if mode == AccessMode.UNKNOWN:
        raise InvalidRequest(f"{what}: access_mode is required")
    if kind == "block":
        return Capability(AccessType.BLOCK, mode)
    return Capability(AccessType.MOUNT, mode, cap.mount.fs_type, tuple(cap.mount.mount_flags))


def capabilities(caps: Iterable[pb.VolumeCapability]) -> list[Capability]:
    return [capability(c, f"volume_capabilities[{i}]") for i, c in enumerate(caps)]


def content_source(request: pb.CreateVolumeRequest) -> ContentSource | None:
    if not request.HasField("volume_content_source"):
        return None
    src = request.volume_content_source
    kind = src.WhichOneof("type")
    if kind == "snapshot":
        return ContentSource("snapshot", src.snapshot.snapshot_id)
    if kind == "volume":
        return ContentSource("volume", src.volume.volume_id)
    raise InvalidRequest("volume_content_source must name a snapshot or a volume")


def content_source_to_pb(source: ContentSource | None) -> pb.VolumeContentSource | None:
    if source is None:
        return None
    if source.kind == "snapshot":
        return pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=source.source_id)
        )
    return pb.VolumeContentSource(
        volume=pb.VolumeContentSource.VolumeSource(volume_id=source.source_id)
    )


def topology_requirement(
    request: pb.CreateVolumeRequest | pb.CreateSnapshotRequest,
) -> TopologyRequirement | None:
    if not request.HasField("accessibility_requirements"):
        return None
    req = request.accessibility_requirements
    return TopologyRequirement(
        requisite=[dict(t.segments) for t in req.requisite],
        preferred=[dict(t.segments) for t in req.preferred],
    )


def volume_to_pb(
    volume: Volume, context: dict[str, str], topology: list[dict[str, str]]
) -> pb.Volume:
    out = pb.Volume(
        volume_id=volume.volume_id,
        capacity_bytes=volume.capacity_bytes,
        volume_context=context,
        accessible_topology=[pb.Topology(segments=t) for t in topology],
    )
    source = content_source_to_pb(volume.content_source)
    if source is not None:
        out.content_source.CopyFrom(source)
    return out


def snapshot_to_pb(
    snap: Snapshot, *, group_id: str = "", topology: Iterable[Mapping[str, str]] = ()
) -> pb.Snapshot:
    created = timestamp_pb2.Timestamp()
    created.FromNanoseconds(int(snap.created_at * 1e9))
    return pb.Snapshot(
        snapshot_id=snap.snapshot_id,
        source_volume_id=snap.source_volume_id,
        # The least a restore may ask for, not the bytes held: external-provisioner refuses a
        # claim below it, and the driver rounds a claim at it up to the whole source.
        size_bytes=snap.restore_floor,
        creation_time=created,
        ready_to_use=snap.ready,
        group_snapshot_id=group_id,
        accessible_topology=[pb.Topology(segments=t) for t in topology],
    )


def volume_health_to_pb(volume_id: str, problems: Iterable[Problem]) -> pb.VolumeHealth:
    """CSI v1.13's VolumeHealth: one entry per problem; none means healthy."""
    Entry = pb.VolumeHealth.VolumeHealthEntry
    return pb.VolumeHealth(
        volume_id=volume_id,
        health_statuses=[
            Entry(
                status=pb.VolumeHealthErrorType.Value(p.kind.name),
                reason=p.reason,
                message=p.message,
            )
            for p in problems
        ],
    )
