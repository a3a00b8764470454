"""spec.md's error tables for the snapshot RPCs and ControllerExpandVolume, row by row.

The error tables of spec.md for CreateSnapshot, DeleteSnapshot, ListSnapshots and
ControllerExpandVolume, one test per row (rows that can't happen in this driver say why). The
rows hold on both system layers (`layered_driver`: fake in make unit, real marked real); the rows
that need a pool to run out use `fake_driver`'s 64 MiB pool or a real tmpfs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.system.base import System
from csi_hostpath.system.fake import fake_system
from tests.conftest import Client, in_process, on_small_pool
from tests.support import helpers as h

C = grpc.StatusCode
MiB = h.MiB
UNKNOWN_VOLUME = "vol-" + "0" * 32
UNKNOWN_SNAPSHOT = "snap-" + "0" * 32


def snapshot(client: Client, source: str, name: str) -> pb.Snapshot:
    reply: pb.CreateSnapshotResponse = client.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=source, name=name)
    )
    return reply.snapshot


def expand(client: Client, volume_id: str, required: int, limit: int = 0) -> Any:
    return client.controller.ControllerExpandVolume(
        pb.ControllerExpandVolumeRequest(
            volume_id=volume_id,
            capacity_range=pb.CapacityRange(required_bytes=required, limit_bytes=limit),
        )
    )


# ----- CreateSnapshot -----
def test_create_snapshot_missing_fields_invalid_argument(layered_driver: Client) -> None:
    h.expect_code(C.INVALID_ARGUMENT, snapshot, layered_driver, "", "s")
    h.expect_code(C.INVALID_ARGUMENT, snapshot, layered_driver, UNKNOWN_VOLUME, "")


def test_create_snapshot_source_missing_not_found(layered_driver: Client) -> None:
    """Not in the table, but "Source volume does not exist" is NOT_FOUND in csi-sanity too."""
    h.expect_code(C.NOT_FOUND, snapshot, layered_driver, UNKNOWN_VOLUME, "s")


def test_snapshot_already_exists_but_is_incompatible(layered_driver: Client) -> None:
    """ "Snapshot already exists but is incompatible" → 6 ALREADY_EXISTS."""
    a = h.create(layered_driver, "a", h.block_cap(), 4 * MiB)
    b = h.create(layered_driver, "b", h.block_cap(), 4 * MiB)
    first = snapshot(layered_driver, a.volume_id, "s")
    assert snapshot(layered_driver, a.volume_id, "s") == first
    h.expect_code(C.ALREADY_EXISTS, snapshot, layered_driver, b.volume_id, "s")


class SlowCopyPool:
    """Holds copy_sparse until released, so a second CreateSnapshot surely overlaps."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def copy_sparse(self, source: Path, dest: Path) -> None:
        self.entered.set()
        assert self.release.wait(30)
        self.inner.copy_sparse(source, dest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_snapshot_operation_pending_aborted(workdir: Path) -> None:
    """ "Operation pending for snapshot" → 10 ABORTED: the name is held during the copy."""
    pools: list[SlowCopyPool] = []

    def slow_system(pool_dir: Path) -> System:
        base = fake_system(pool_dir)
        pools.append(SlowCopyPool(base.pool))
        return System(pools[0], base.loop, base.fs, base.mounts, base.devices, base.io)

    with in_process(workdir, "g", system=slow_system) as client:
        pool = pools[0]
        try:
            vol = h.create(client, "a", h.block_cap(), 4 * MiB)
            outcome: list[Any] = []
            first = threading.Thread(
                target=lambda: outcome.append(snapshot(client, vol.volume_id, "racy"))
            )
            first.start()
            assert pool.entered.wait(10)
            err = h.expect_code(C.ABORTED, snapshot, client, vol.volume_id, "racy")
            assert "CreateSnapshot" in (err.details() or "")
            pool.release.set()
            first.join(20)
            assert outcome and outcome[0].snapshot_id
            assert snapshot(client, vol.volume_id, "racy") == outcome[0]
        finally:
            pool.release.set()


def test_snapshot_not_enough_space_resource_exhausted(fake_driver: Client, workdir: Path) -> None:
    """ "Not enough space to create snapshot" → 8 RESOURCE_EXHAUSTED."""
    vol = h.create(fake_driver, "full", h.block_cap(), 48 * MiB)
    backing = workdir / "f-state" / "pool" / "volumes" / f"{vol.volume_id}.img"
    with open(backing, "r+b") as f:
        f.write(b"\x01" * (40 * MiB))
    err = h.expect_code(C.RESOURCE_EXHAUSTED, snapshot, fake_driver, vol.volume_id, "too-big")
    assert "room" in (err.details() or "")


# ----- DeleteSnapshot -----
def test_delete_snapshot_rows(layered_driver: Client) -> None:
    """snapshot_id REQUIRED → INVALID_ARGUMENT; an unknown ID → OK (idempotent). "Snapshot in
    use" can't happen: a snapshot is an independent copy, and restores copy it again."""
    h.expect_code(
        C.INVALID_ARGUMENT, layered_driver.controller.DeleteSnapshot, pb.DeleteSnapshotRequest()
    )
    layered_driver.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=UNKNOWN_SNAPSHOT))
    layered_driver.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id="bogus/../x"))
    vol = h.create(layered_driver, "a", h.block_cap(), 4 * MiB)
    snap = snapshot(layered_driver, vol.volume_id, "s")
    h.delete(layered_driver, vol.volume_id)  # a snapshot outlives its source
    restored = layered_driver.controller.CreateVolume(
        pb.CreateVolumeRequest(
            name="r",
            volume_capabilities=[h.block_cap()],
            volume_content_source=pb.VolumeContentSource(
                snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snap.snapshot_id)
            ),
        )
    )
    assert restored.volume.capacity_bytes == 4 * MiB
    for _ in range(2):
        layered_driver.controller.DeleteSnapshot(
            pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id)
        )
    h.expect_code(
        C.NOT_FOUND,
        layered_driver.controller.GetSnapshot,
        pb.GetSnapshotRequest(snapshot_id=snap.snapshot_id),
    )


# ----- ListSnapshots -----
def test_list_snapshots_invalid_starting_token_aborted(layered_driver: Client) -> None:
    """ "Invalid starting_token" → 10 ABORTED; pagination and both filters work."""
    h.expect_code(
        C.ABORTED,
        layered_driver.controller.ListSnapshots,
        pb.ListSnapshotsRequest(starting_token="nonsense"),
    )
    a = h.create(layered_driver, "a", h.block_cap(), 4 * MiB)
    b = h.create(layered_driver, "b", h.block_cap(), 4 * MiB)
    made = [
        snapshot(layered_driver, v.volume_id, f"s{i}").snapshot_id
        for i, v in enumerate([a, b, a, b, a])
    ]
    seen, token = [], ""
    while True:
        reply = layered_driver.controller.ListSnapshots(
            pb.ListSnapshotsRequest(max_entries=2, starting_token=token)
        )
        seen += [e.snapshot.snapshot_id for e in reply.entries]
        token = reply.next_token
        if not token:
            break
    assert seen == made
    of_a = layered_driver.controller.ListSnapshots(
        pb.ListSnapshotsRequest(source_volume_id=a.volume_id)
    ).entries
    assert [e.snapshot.snapshot_id for e in of_a] == made[0::2]
    one = layered_driver.controller.ListSnapshots(
        pb.ListSnapshotsRequest(snapshot_id=made[3])
    ).entries
    assert [e.snapshot.snapshot_id for e in one] == [made[3]]
    none = layered_driver.controller.ListSnapshots(
        pb.ListSnapshotsRequest(snapshot_id=UNKNOWN_SNAPSHOT)
    ).entries
    assert list(none) == []


# ----- ControllerExpandVolume -----
def test_expand_missing_fields_invalid_argument(layered_driver: Client) -> None:
    h.expect_code(
        C.INVALID_ARGUMENT,
        layered_driver.controller.ControllerExpandVolume,
        pb.ControllerExpandVolumeRequest(capacity_range=pb.CapacityRange(required_bytes=MiB)),
    )
    vol = h.create(layered_driver, "a", h.block_cap(), 4 * MiB)
    h.expect_code(
        C.INVALID_ARGUMENT,
        layered_driver.controller.ControllerExpandVolume,
        pb.ControllerExpandVolumeRequest(volume_id=vol.volume_id),
    )


def test_expand_volume_does_not_exist_not_found(layered_driver: Client) -> None:
    """ "Volume does not exist" → 5 NOT_FOUND."""
    h.expect_code(C.NOT_FOUND, expand, layered_driver, UNKNOWN_VOLUME, 8 * MiB)


def test_expand_unsupported_capacity_out_of_range(workdir: Path) -> None:
    """ "Unsupported capacity" → 11 OUT_OF_RANGE (beyond --max-volume-size, or limit < required).
    "Volume in use" can't happen: expansion is online."""
    with in_process(workdir, "m", "--max-volume-size", str(16 * MiB), system=fake_system) as client:
        vol = h.create(client, "a", h.block_cap(), 4 * MiB)
        h.expect_code(C.OUT_OF_RANGE, expand, client, vol.volume_id, 32 * MiB)
        h.expect_code(C.OUT_OF_RANGE, expand, client, vol.volume_id, 12 * MiB, 8 * MiB)
        assert expand(client, vol.volume_id, 16 * MiB).capacity_bytes == 16 * MiB


@pytest.mark.real
def test_snapshot_not_enough_space_on_a_real_pool(workdir: Path) -> None:
    """The same row as above on the real system layer: a pool on a 64 MiB tmpfs, a volume with
    40 MiB of data, and a snapshot that can't fit → RESOURCE_EXHAUSTED, and no partial copy."""
    with on_small_pool(workdir, "small", 64) as (client, pool):
        vol = h.create(client, "full", h.block_cap(), 48 * MiB)
        with open(pool / "volumes" / f"{vol.volume_id}.img", "r+b") as f:
            f.write(b"\x01" * (40 * MiB))
        err = h.expect_code(C.RESOURCE_EXHAUSTED, snapshot, client, vol.volume_id, "too-big")
        assert "room" in (err.details() or "")
        assert list((pool / "snapshots").iterdir()) == [], "no partial copy is left"
