"""One successful call of every RPC the driver serves, each measured on its own.

The calls run in an order that gives each the state it needs (a volume, published, staged, a
snapshot...); what a call needs and is not itself being measured is done between two measures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.daemon.server import Driver
from tests.conftest import Client

MiB = 1 << 20
CAP = rq.mount_cap()
# The behaviour the document counted apart: ControllerPublishVolume of a single-node volume
# that another node holds, measured until the refusal is raised.
REFUSAL = "ControllerPublishVolume (refused: multi-attach)"


class Measure(Protocol):
    def __call__(self, rpc: str, call: Callable[[], Any], label: str = "") -> Any: ...


def _stream(call: Callable[[], Any]) -> Callable[[], list[Any]]:
    return lambda: list(call())


def identity(client: Client, measure: Measure) -> None:
    measure("GetPluginInfo", lambda: client.identity.GetPluginInfo(pb.GetPluginInfoRequest()))
    measure(
        "GetPluginCapabilities",
        lambda: client.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest()),
    )
    measure("Probe", lambda: client.identity.Probe(pb.ProbeRequest()))


def capabilities(client: Client, measure: Measure) -> None:
    c = client.controller
    measure(
        "ControllerGetCapabilities",
        lambda: c.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest()),
    )
    measure(
        "NodeGetCapabilities",
        lambda: client.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest()),
    )
    measure("NodeGetInfo", lambda: client.node.NodeGetInfo(pb.NodeGetInfoRequest()))
    measure(
        "GroupControllerGetCapabilities",
        lambda: client.controller_group.GroupControllerGetCapabilities(
            pb.GroupControllerGetCapabilitiesRequest()
        ),
    )
    measure(
        "GetCapacity",
        lambda: c.GetCapacity(pb.GetCapacityRequest(volume_capabilities=[CAP])),
    )


def volume_reads(client: Client, measure: Measure, volume_id: str) -> None:
    c = client.controller
    measure(
        "ValidateVolumeCapabilities",
        lambda: c.ValidateVolumeCapabilities(
            pb.ValidateVolumeCapabilitiesRequest(volume_id=volume_id, volume_capabilities=[CAP])
        ),
    )
    measure("ListVolumes", lambda: c.ListVolumes(pb.ListVolumesRequest()))
    measure(
        "ControllerGetVolume",
        lambda: c.ControllerGetVolume(pb.ControllerGetVolumeRequest(volume_id=volume_id)),
    )
    measure(
        "ControllerGetVolumeHealth",
        lambda: c.ControllerGetVolumeHealth(
            pb.ControllerGetVolumeHealthRequest(volume_id=volume_id)
        ),
    )
    measure(
        "ControllerListVolumeHealth",
        lambda: c.ControllerListVolumeHealth(pb.ControllerListVolumeHealthRequest()),
    )
    measure(
        "ControllerModifyVolume",
        lambda: c.ControllerModifyVolume(
            pb.ControllerModifyVolumeRequest(
                volume_id=volume_id, mutable_parameters={"readAheadKiB": "256"}
            )
        ),
    )


def node_reads(client: Client, measure: Measure, volume_id: str, paths: tuple[Path, Path]) -> None:
    staging, target = paths
    n = client.node
    measure(
        "NodeGetVolumeStats",
        lambda: n.NodeGetVolumeStats(rq.volume_stats(volume_id, target, staging)),
    )
    measure(
        "NodeGetVolumeHealth",
        lambda: n.NodeGetVolumeHealth(
            pb.NodeGetVolumeHealthRequest(
                volume_id=volume_id,
                volume_publish_path=str(target),
                staging_target_path=str(staging),
            )
        ),
    )
    measure(
        "NodeGetStorageHealth", lambda: n.NodeGetStorageHealth(pb.NodeGetStorageHealthRequest())
    )


def expansion(client: Client, measure: Measure, volume_id: str, target: Path) -> None:
    grown = pb.CapacityRange(required_bytes=96 * MiB)
    measure(
        "ControllerExpandVolume",
        lambda: client.controller.ControllerExpandVolume(
            pb.ControllerExpandVolumeRequest(volume_id=volume_id, capacity_range=grown)
        ),
    )
    measure(
        "NodeExpandVolume",
        lambda: client.node.NodeExpandVolume(
            pb.NodeExpandVolumeRequest(
                volume_id=volume_id,
                volume_path=str(target),
                capacity_range=grown,
                volume_capability=CAP,
            )
        ),
    )


def snapshots(client: Client, measure: Measure, volume_id: str) -> None:
    c = client.controller
    metadata = pb_grpc.SnapshotMetadataStub(client.channel)
    snap = measure(
        "CreateSnapshot", lambda: c.CreateSnapshot(rq.create_snapshot("snap-a", volume_id))
    ).snapshot.snapshot_id
    later = c.CreateSnapshot(rq.create_snapshot("snap-b", volume_id)).snapshot.snapshot_id
    measure("ListSnapshots", lambda: c.ListSnapshots(pb.ListSnapshotsRequest()))
    measure("GetSnapshot", lambda: c.GetSnapshot(pb.GetSnapshotRequest(snapshot_id=snap)))
    measure(
        "GetMetadataAllocated",
        _stream(
            lambda: metadata.GetMetadataAllocated(pb.GetMetadataAllocatedRequest(snapshot_id=snap))
        ),
    )
    measure(
        "GetMetadataDelta",
        _stream(
            lambda: metadata.GetMetadataDelta(
                pb.GetMetadataDeltaRequest(base_snapshot_id=snap, target_snapshot_id=later)
            )
        ),
    )
    measure("DeleteSnapshot", lambda: c.DeleteSnapshot(rq.delete_snapshot(later)))
    c.DeleteSnapshot(rq.delete_snapshot(snap))


def group_snapshots(client: Client, measure: Measure, volume_id: str) -> None:
    g = client.controller_group
    group = measure(
        "CreateVolumeGroupSnapshot",
        lambda: g.CreateVolumeGroupSnapshot(
            pb.CreateVolumeGroupSnapshotRequest(name="group-a", source_volume_ids=[volume_id])
        ),
    ).group_snapshot.group_snapshot_id
    measure(
        "GetVolumeGroupSnapshot",
        lambda: g.GetVolumeGroupSnapshot(pb.GetVolumeGroupSnapshotRequest(group_snapshot_id=group)),
    )
    members = [
        s.snapshot_id
        for s in g.GetVolumeGroupSnapshot(
            pb.GetVolumeGroupSnapshotRequest(group_snapshot_id=group)
        ).group_snapshot.snapshots
    ]
    measure(
        "DeleteVolumeGroupSnapshot",
        lambda: g.DeleteVolumeGroupSnapshot(
            pb.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=group, snapshot_ids=members)
        ),
    )


def refusal(driver: Driver, client: Client, measure: Measure, volume_id: str) -> None:
    """The volume, published to this driver's node, asked for by a second node that is alive
    (its heartbeat written to the pool as its node plugin would)."""
    driver.layout.beat("node-b")

    def refused() -> grpc.StatusCode:
        try:
            client.controller.ControllerPublishVolume(
                rq.controller_publish(volume_id, "node-b", CAP)
            )
        except grpc.RpcError as e:
            return e.code()
        raise AssertionError("a second node's publish of a single-node volume was let through")

    code = measure("ControllerPublishVolume", refused, REFUSAL)
    assert code == grpc.StatusCode.FAILED_PRECONDITION, code


def every_rpc(driver: Driver, client: Client, root: Path, measure: Measure) -> None:
    """Each RPC the driver serves, once, successfully, in the order of a volume's life."""
    c, n = client.controller, client.node
    identity(client, measure)
    capabilities(client, measure)
    volume = measure(
        "CreateVolume", lambda: c.CreateVolume(rq.create_volume("vol-a", CAP, 64 * MiB))
    ).volume
    volume_id = volume.volume_id
    volume_reads(client, measure, volume_id)
    context = measure(
        "ControllerPublishVolume",
        lambda: c.ControllerPublishVolume(rq.controller_publish(volume_id, "node-a", CAP)),
    ).publish_context
    refusal(driver, client, measure, volume_id)
    staging, target = root / "staging", root / "target"
    staging.mkdir()
    measure(
        "NodeStageVolume",
        lambda: n.NodeStageVolume(
            rq.node_stage(volume_id, staging, CAP, context, volume.volume_context)
        ),
    )
    measure(
        "NodePublishVolume",
        lambda: n.NodePublishVolume(rq.node_publish(volume_id, staging, target, CAP)),
    )
    node_reads(client, measure, volume_id, (staging, target))
    expansion(client, measure, volume_id, target)
    snapshots(client, measure, volume_id)
    group_snapshots(client, measure, volume_id)
    measure(
        "NodeUnpublishVolume", lambda: n.NodeUnpublishVolume(rq.node_unpublish(volume_id, target))
    )
    measure("NodeUnstageVolume", lambda: n.NodeUnstageVolume(rq.node_unstage(volume_id, staging)))
    measure(
        "ControllerUnpublishVolume",
        lambda: c.ControllerUnpublishVolume(rq.controller_unpublish(volume_id, "node-a")),
    )
    measure("DeleteVolume", lambda: c.DeleteVolume(rq.delete_volume(volume_id)))
