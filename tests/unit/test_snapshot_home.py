"""Snapshots know their node: two local-scope controllers over real gRPC servers.

Two local-scope controllers (node-a, node-b), each with its own pool, over real gRPC servers (fake
system layer: no root needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.naming import is_snapshot_id, new_snapshot_id, snapshot_home
from tests.conftest import Client, in_process
from tests.support import helpers as h

C = grpc.StatusCode
MiB = 1 << 20
KEY = "topology.loop.hostpath.csi.dev/node"


@pytest.fixture
def nodes(workdir: Path) -> Iterator[tuple[Client, Client]]:
    from csi_hostpath.system.fake import fake_system

    def system(pool: Path) -> object:
        return fake_system(pool, capacity_bytes=256 << 20)

    with (
        in_process(workdir, "a", "--node-id", "node-a", system=system) as a,
        in_process(workdir, "b", "--node-id", "node-b", system=system) as b,
    ):
        yield a, b


def _create_from(client: Client, name: str, source: pb.VolumeContentSource) -> pb.Volume:
    request = pb.CreateVolumeRequest(
        name=name, volume_capabilities=[h.mount_cap("ext4")], volume_content_source=source
    )
    reply: pb.CreateVolumeResponse = client.controller.CreateVolume(request)
    return reply.volume


def _restore(client: Client, name: str, snapshot_id: str) -> pb.Volume:
    snapshot = pb.VolumeContentSource.SnapshotSource(snapshot_id=snapshot_id)
    return _create_from(client, name, pb.VolumeContentSource(snapshot=snapshot))


def _clone(client: Client, name: str, volume_id: str) -> pb.Volume:
    volume = pb.VolumeContentSource.VolumeSource(volume_id=volume_id)
    return _create_from(client, name, pb.VolumeContentSource(volume=volume))


def test_a_restore_asked_on_another_node_says_where_the_snapshot_is(
    nodes: tuple[Client, Client],
) -> None:
    """Failed on the old code: node-b answered NOT_FOUND, a final error, so the provisioner
    gave up instead of rescheduling to node-a, and nothing said where the snapshot was."""
    a, b = nodes
    src = h.create(a, "src", h.mount_cap("ext4"), 8 * MiB)
    snap = a.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=src.volume_id, name="s")
    ).snapshot
    assert snapshot_home(snap.snapshot_id) == "node-a"
    err = h.expect_code(C.RESOURCE_EXHAUSTED, _restore, b, "r", snap.snapshot_id)
    assert "node-a" in (err.details() or "") and "node-b" in (err.details() or "")
    restored = _restore(a, "r", snap.snapshot_id)
    assert [dict(t.segments) for t in restored.accessible_topology] == [{KEY: "node-a"}]
    # A clone of node-a's volume asked on node-b: not here, so reschedule.
    h.expect_code(C.RESOURCE_EXHAUSTED, _clone, b, "c", src.volume_id)
    assert _clone(a, "c", src.volume_id).volume_id
    # The snapshot's own node, once it is deleted, answers NOT_FOUND: final, nothing to find.
    a.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id))
    h.expect_code(C.NOT_FOUND, _restore, a, "gone", snap.snapshot_id)


def test_ids_without_a_home_stay_not_found(nodes: tuple[Client, Client]) -> None:
    _, b = nodes
    h.expect_code(C.NOT_FOUND, _restore, b, "x", new_snapshot_id())
    h.expect_code(C.NOT_FOUND, _restore, b, "y", "non-existing-snapshot-id")
    h.expect_code(C.NOT_FOUND, _clone, b, "z", "non-existing-src-volume-id")


def test_the_home_is_carried_only_when_it_is_a_plain_node_name() -> None:
    assert snapshot_home(new_snapshot_id("worker-1.example")) == "worker-1.example"
    for odd in ("", "../etc", "a/b", "x" * 81, "-lead"):
        assert snapshot_home(new_snapshot_id(odd)) is None
    assert is_snapshot_id(new_snapshot_id("n" * 80)) and len(new_snapshot_id("n" * 80)) <= 128
    assert not is_snapshot_id("snap-" + "0" * 32 + "@../x")


def _topologies(snap: pb.Snapshot) -> list[dict[str, str]]:
    return [dict(t.segments) for t in snap.accessible_topology]


def test_a_local_snapshot_reports_its_node_as_its_topology(nodes: tuple[Client, Client]) -> None:
    """CSI v1.13's snapshot topology: the plugin says SNAPSHOT_ACCESSIBILITY_CONSTRAINTS, and
    a local-scope snapshot is usable from its own node only, in every RPC that returns it."""
    a, _ = nodes
    caps = a.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest()).capabilities
    Service = pb.PluginCapability.Service
    assert Service.SNAPSHOT_ACCESSIBILITY_CONSTRAINTS in {c.service.type for c in caps}
    src = h.create(a, "src", h.mount_cap("ext4"), 8 * MiB)
    snap = a.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=src.volume_id, name="s")
    ).snapshot
    assert _topologies(snap) == [{KEY: "node-a"}]
    got = a.controller.GetSnapshot(pb.GetSnapshotRequest(snapshot_id=snap.snapshot_id))
    assert _topologies(got.snapshot) == [{KEY: "node-a"}]
    listed = a.controller.ListSnapshots(pb.ListSnapshotsRequest(snapshot_id=snap.snapshot_id))
    assert [_topologies(e.snapshot) for e in listed.entries] == [[{KEY: "node-a"}]]


def test_a_snapshot_asked_for_another_node_is_resource_exhausted(
    nodes: tuple[Client, Client],
) -> None:
    a, _ = nodes
    src = h.create(a, "src", h.mount_cap("ext4"), 8 * MiB)

    def snapshot(name: str, *nodes_asked: str) -> pb.Snapshot:
        wanted = [pb.Topology(segments={KEY: n}) for n in nodes_asked]
        request = pb.CreateSnapshotRequest(
            source_volume_id=src.volume_id,
            name=name,
            accessibility_requirements=pb.TopologyRequirement(requisite=wanted, preferred=wanted),
        )
        reply: pb.CreateSnapshotResponse = a.controller.CreateSnapshot(request)
        return reply.snapshot

    err = h.expect_code(C.RESOURCE_EXHAUSTED, snapshot, "elsewhere", "node-b")
    assert "node-a" in (err.details() or "")
    assert not a.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries  # nothing was cut
    assert _topologies(snapshot("here", "node-b", "node-a")) == [{KEY: "node-a"}]


def test_a_shared_pool_snapshot_has_no_topology(workdir: Path) -> None:
    from csi_hostpath.system.fake import fake_system

    def system(pool: Path) -> object:
        return fake_system(pool, capacity_bytes=64 << 20)

    with in_process(workdir, "s", "--pool-scope", "shared", system=system) as client:
        caps = client.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
        Service = pb.PluginCapability.Service
        assert Service.SNAPSHOT_ACCESSIBILITY_CONSTRAINTS not in {
            c.service.type for c in caps.capabilities
        }
        src = h.create(client, "src", h.mount_cap("ext4"), 8 * MiB)
        request = pb.CreateSnapshotRequest(source_volume_id=src.volume_id, name="s")
        assert _topologies(client.controller.CreateSnapshot(request).snapshot) == []
