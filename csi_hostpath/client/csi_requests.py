"""CSI request builders: one place that knows how a CO fills each request, for every client in this
repository (the demo, the benchmark, the test helpers and the e2e harness's kubelet and
external-attacher). Pure: no I/O, no stubs; callers send the messages themselves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb

Mode = pb.VolumeCapability.AccessMode


def mount_cap(
    fs_type: str = "",
    mode: Mode.Mode.ValueType = Mode.SINGLE_NODE_WRITER,
    flags: Sequence[str] = (),
) -> pb.VolumeCapability:
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(fs_type=fs_type, mount_flags=list(flags)),
        access_mode=Mode(mode=mode),
    )


def block_cap(mode: Mode.Mode.ValueType = Mode.SINGLE_NODE_WRITER) -> pb.VolumeCapability:
    return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(), access_mode=Mode(mode=mode))


def create_volume(
    name: str,
    cap: pb.VolumeCapability,
    size: int,
    source: pb.VolumeContentSource | None = None,
    parameters: Mapping[str, str] | None = None,
    requirements: pb.TopologyRequirement | None = None,
) -> pb.CreateVolumeRequest:
    request = pb.CreateVolumeRequest(
        name=name,
        volume_capabilities=[cap],
        capacity_range=pb.CapacityRange(required_bytes=size),
        parameters=dict(parameters or {}),
    )
    if source is not None:
        request.volume_content_source.CopyFrom(source)
    if requirements is not None:
        request.accessibility_requirements.CopyFrom(requirements)
    return request


def delete_volume(volume_id: str) -> pb.DeleteVolumeRequest:
    return pb.DeleteVolumeRequest(volume_id=volume_id)


def controller_publish(
    volume_id: str,
    node_id: str,
    cap: pb.VolumeCapability,
    readonly: bool = False,
    volume_context: Mapping[str, str] | None = None,
) -> pb.ControllerPublishVolumeRequest:
    return pb.ControllerPublishVolumeRequest(
        volume_id=volume_id,
        node_id=node_id,
        volume_capability=cap,
        readonly=readonly,
        volume_context=dict(volume_context or {}),
    )


def controller_unpublish(volume_id: str, node_id: str) -> pb.ControllerUnpublishVolumeRequest:
    return pb.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id)


def node_stage(
    volume_id: str,
    staging: str | Path,
    cap: pb.VolumeCapability,
    publish_context: Mapping[str, str],
    volume_context: Mapping[str, str] | None = None,
) -> pb.NodeStageVolumeRequest:
    return pb.NodeStageVolumeRequest(
        volume_id=volume_id,
        staging_target_path=str(staging),
        volume_capability=cap,
        publish_context=dict(publish_context),
        volume_context=dict(volume_context or {}),
    )


def node_unstage(volume_id: str, staging: str | Path) -> pb.NodeUnstageVolumeRequest:
    return pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging))


def node_publish(
    volume_id: str,
    staging: str | Path,
    target: str | Path,
    cap: pb.VolumeCapability,
    readonly: bool = False,
    publish_context: Mapping[str, str] | None = None,
    volume_context: Mapping[str, str] | None = None,
) -> pb.NodePublishVolumeRequest:
    return pb.NodePublishVolumeRequest(
        volume_id=volume_id,
        staging_target_path=str(staging),
        target_path=str(target),
        volume_capability=cap,
        readonly=readonly,
        publish_context=dict(publish_context or {}),
        volume_context=dict(volume_context or {}),
    )


def node_unpublish(volume_id: str, target: str | Path) -> pb.NodeUnpublishVolumeRequest:
    return pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=str(target))


def volume_stats(
    volume_id: str, path: str | Path, staging: str | Path = ""
) -> pb.NodeGetVolumeStatsRequest:
    return pb.NodeGetVolumeStatsRequest(
        volume_id=volume_id, volume_path=str(path), staging_target_path=str(staging)
    )


def create_snapshot(name: str, source_volume_id: str) -> pb.CreateSnapshotRequest:
    return pb.CreateSnapshotRequest(name=name, source_volume_id=source_volume_id)


def delete_snapshot(snapshot_id: str) -> pb.DeleteSnapshotRequest:
    return pb.DeleteSnapshotRequest(snapshot_id=snapshot_id)
