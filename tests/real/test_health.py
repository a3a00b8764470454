"""CSI v1.13's health RPCs on real devices: each condition caused, seen and seen to clear.

CSI v1.13's health RPCs (the node's two, and the controller's two where it sees the volume)
on real loop devices, ext4 and a tmpfs pool: each condition is caused for real, seen with its
kind and reason, and seen to clear.

- INACCESSIBLE: the volume's backing file is gone from the pool (moved aside, then back);
- DATA_LOSS: ext4 counted an error (`/sys/fs/ext4/<dev>/trigger_fs_error`, the kernel's own way
  to raise one); fsck between an unstage and the next stage clears it;
- DEGRADED: the pool is full (a file of the test's own fills the tmpfs), then has room again;
  a snapshot's freeze held past half of --max-freeze-seconds, then thawed;
- STORAGE_DEGRADED: the pool below its reserve, then read-only (a read-only bind mount of the
  test's own over it);
- STORAGE_UNREACHABLE: the pool directory gone (renamed away, then back)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.capacity import POOL_RESERVE_BYTES
from csi_hostpath.service.node.freeze import TEST_HOLD_ENV
from tests.conftest import Client, in_process, on_small_pool
from tests.support import helpers as h

MiB = h.MiB
Status = pb.VolumeHealthErrorType
Storage = pb.StorageHealthErrorType
C = grpc.StatusCode


def _health(client: Client, volume_id: str, target: Path | None = None) -> list[tuple[int, str]]:
    health = client.node.NodeGetVolumeHealth(
        pb.NodeGetVolumeHealthRequest(
            volume_id=volume_id, volume_publish_path=str(target) if target else ""
        )
    ).volume_health
    assert health.volume_id == volume_id
    return [(e.status, e.reason) for e in health.health_statuses]


def _controller(client: Client, volume_id: str) -> list[tuple[int, str]]:
    """ControllerGetVolumeHealth, checked against ControllerListVolumeHealth's entry."""
    health = client.controller.ControllerGetVolumeHealth(
        pb.ControllerGetVolumeHealthRequest(volume_id=volume_id)
    ).volume_health
    assert health.volume_id == volume_id
    got = [(e.status, e.reason) for e in health.health_statuses]
    listed = client.controller.ControllerListVolumeHealth(pb.ControllerListVolumeHealthRequest())
    entries = [e for e in listed.entries if e.volume_id == volume_id]
    assert [[(s.status, s.reason) for s in e.health_statuses] for e in entries] == (
        [got] if got else []
    ), "the list names only abnormal volumes, as the get does"
    return got


def _eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    """The controller reads the node's heartbeat, written on the node's next fence pass."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.2)


def _storage(client: Client) -> list[tuple[int, str]]:
    reply = client.node.NodeGetStorageHealth(pb.NodeGetStorageHealthRequest())
    return [(b.status, b.reason) for b in reply.backend_health]


def _condition(client: Client, volume_id: str, target: Path) -> pb.VolumeCondition:
    reply: pb.NodeGetVolumeStatsResponse = client.node.NodeGetVolumeStats(
        pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target))
    )
    return reply.volume_condition


@contextlib.contextmanager
def _filled(pool: Path, leave: int = 0) -> Iterator[None]:
    """The pool's filesystem filled (up to `leave` bytes) by a file of the test's own."""
    filler = pool / "test-filler"
    try:
        with open(filler, "wb") as f, contextlib.suppress(OSError):
            while True:
                st = os.statvfs(pool)
                room = st.f_bavail * st.f_frsize - leave
                if room <= 0:
                    break
                f.write(b"\0" * min(room, MiB))
                f.flush()
        yield
    finally:
        filler.unlink(missing_ok=True)


def test_the_capabilities_are_advertised(workdir: Path) -> None:
    with in_process(workdir, "drv") as client:
        caps = client.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest()).capabilities
        types = {c.rpc.type for c in caps}
        RPC = pb.NodeServiceCapability.RPC
        assert {RPC.GET_VOLUME_HEALTH, RPC.GET_STORAGE_HEALTH} <= types
        assert RPC.VOLUME_CONDITION in types  # the v1.12 way stays for the COs that read it
        ctl = client.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest())
        CRPC = pb.ControllerServiceCapability.RPC
        ctl_types = {c.rpc.type for c in ctl.capabilities}
        assert {CRPC.GET_VOLUME_HEALTH, CRPC.LIST_VOLUME_HEALTH, CRPC.VOLUME_CONDITION} <= ctl_types


def test_a_missing_backing_file_is_inaccessible_then_clears(workdir: Path) -> None:
    with on_small_pool(workdir, "p", 256) as (client, pool):
        vol, staging, target = h.in_use(client, workdir, "a", h.mount_cap("ext4"))
        assert _health(client, vol.volume_id, target) == []
        assert _health(client, vol.volume_id) == []  # no path: where it is staged
        (backing,) = pool.rglob(f"{vol.volume_id}*.img")
        aside = backing.with_name("aside")
        os.link(backing, aside)
        assert _controller(client, vol.volume_id) == []
        backing.unlink()
        try:
            gone = [(Status.INACCESSIBLE, "BackingFileMissing")]
            assert _health(client, vol.volume_id, target) == gone
            assert _controller(client, vol.volume_id) == gone
            assert _condition(client, vol.volume_id, target).abnormal
        finally:
            os.link(aside, backing)
            aside.unlink()
        assert _health(client, vol.volume_id, target) == []
        assert _controller(client, vol.volume_id) == []
        h.release(client, vol.volume_id, staging, target)


def test_ext4_errors_are_data_loss_until_fsck(workdir: Path) -> None:
    with on_small_pool(workdir, "p", 256) as (client, pool):
        cap = h.mount_cap("ext4")
        vol, staging, target = h.in_use(client, workdir, "a", cap)
        device = next(
            line.split()[0]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1] == str(staging)
        )
        trigger = Path(f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error")
        if not trigger.exists():
            h.release(client, vol.volume_id, staging, target)
            pytest.skip("this kernel's ext4 has no trigger_fs_error")
        trigger.write_text("a test of the driver's health report\n")
        # The kernel writes the error into the superblock's count from a work item, which a busy
        # machine runs late: wait for the kernel's own record, then ask the driver at once.
        count = trigger.with_name("errors_count")
        _eventually(lambda: int(count.read_text()) > 0)
        lost = (Status.DATA_LOSS, "FilesystemErrors")
        assert lost in _health(client, vol.volume_id, target)
        assert "I/O error" in _condition(client, vol.volume_id, target).message
        _eventually(lambda: lost in _controller(client, vol.volume_id))

        # The operator's cure the message names: unstage, fsck, stage again.
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
        (backing,) = pool.rglob(f"{vol.volume_id}*.img")
        fsck = subprocess.run(
            ["e2fsck", "-fy", str(backing)], check=False, capture_output=True, text=True
        )
        assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr  # 1: errors corrected
        h.unpublish(client, vol.volume_id, "node-a")
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
        assert _health(client, vol.volume_id, target) == []
        _eventually(lambda: _controller(client, vol.volume_id) == [])
        h.release(client, vol.volume_id, staging, target)


def test_a_full_pool_degrades_volume_and_storage_then_clears(workdir: Path) -> None:
    with on_small_pool(workdir, "p", 128) as (client, pool):
        vol, staging, target = h.in_use(client, workdir, "a", h.mount_cap("ext4"))
        assert _storage(client) == []
        with _filled(pool, leave=POOL_RESERVE_BYTES // 2):
            assert _storage(client) == [(Storage.STORAGE_DEGRADED, "PoolBelowReserve")]
            assert _health(client, vol.volume_id, target) == []  # room left: no write fails
        with _filled(pool):
            assert (Status.DEGRADED, "PoolFull") in _health(client, vol.volume_id, target)
            assert (Status.DEGRADED, "PoolFull") in _controller(client, vol.volume_id)
            assert (Storage.STORAGE_DEGRADED, "PoolBelowReserve") in _storage(client)
        assert _health(client, vol.volume_id, target) == []
        assert _storage(client) == []
        h.release(client, vol.volume_id, staging, target)


def test_a_read_only_pool_is_storage_degraded_then_clears(workdir: Path) -> None:
    with on_small_pool(workdir, "p", 64) as (client, pool):
        # A read-only bind mount over the pool: the driver's open files keep the tmpfs busy for
        # a plain remount, and the pool's path is what the check reads.
        subprocess.run(["mount", "--bind", str(pool), str(pool)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(pool)], check=True)
            assert _storage(client) == [(Storage.STORAGE_DEGRADED, "PoolReadOnly")]
        finally:
            subprocess.run(["umount", str(pool)], check=True)
        assert _storage(client) == []


def test_a_pool_directory_gone_is_storage_unreachable_then_clears(workdir: Path) -> None:
    pool = workdir / "pool-dir"
    pool.mkdir()
    with in_process(workdir, "drv", "--pool-dir", str(pool)) as client:
        assert _storage(client) == []
        aside = workdir / "pool-aside"
        pool.rename(aside)
        try:
            assert _storage(client) == [(Storage.STORAGE_UNREACHABLE, "PoolDirectoryGone")]
        finally:
            aside.rename(pool)
        assert _storage(client) == []


def test_a_freeze_held_too_long_is_degraded_then_clears(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's freeze held 3 s (the freeze module's test hook) with --max-freeze-seconds 4:
    past half of that it is DEGRADED (Frozen); thawed when the snapshot is cut, it clears."""
    monkeypatch.setenv(TEST_HOLD_ENV, "3")
    with in_process(workdir, "drv", "--max-freeze-seconds", "4") as client:
        vol, staging, target = h.in_use(client, workdir, "a", h.mount_cap("ext4"))
        assert _health(client, vol.volume_id, target) == []
        request = pb.CreateSnapshotRequest(source_volume_id=vol.volume_id, name="s")
        cut = threading.Thread(target=client.controller.CreateSnapshot, args=(request,))
        cut.start()
        try:
            _eventually(
                lambda: (Status.DEGRADED, "Frozen") in _health(client, vol.volume_id, target), 5
            )
        finally:
            cut.join(30)
        monkeypatch.delenv(TEST_HOLD_ENV)
        assert _health(client, vol.volume_id, target) == []
        snaps = client.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries
        for entry in snaps:
            client.controller.DeleteSnapshot(
                pb.DeleteSnapshotRequest(snapshot_id=entry.snapshot.snapshot_id)
            )
        h.release(client, vol.volume_id, staging, target)


def test_a_healthy_block_volume_reports_nothing_wrong(workdir: Path) -> None:
    with on_small_pool(workdir, "p", 128) as (client, _):
        volume_id, staging, target = h.block_in_use(client, workdir, "b", 32 * MiB)
        assert _health(client, volume_id) == []
        assert _health(client, volume_id, target) == []
        h.release(client, volume_id, staging, target)


def test_a_volume_not_staged_here_is_not_found(workdir: Path) -> None:
    with in_process(workdir, "drv") as client:
        vol = h.create(client, "a", h.mount_cap("ext4"), 16 * MiB)
        get = client.node.NodeGetVolumeHealth
        h.expect_code(C.NOT_FOUND, get, pb.NodeGetVolumeHealthRequest(volume_id=vol.volume_id))
        h.expect_code(C.INVALID_ARGUMENT, get, pb.NodeGetVolumeHealthRequest())
        h.delete(client, vol.volume_id)
