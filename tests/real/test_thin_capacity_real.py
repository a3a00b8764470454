"""Honest thin capacity on real parts: a pool on its own small tmpfs, loop devices, mkfs, mounts.

- GetCapacity on a real pool says what the pool can still promise, and CreateVolume keeps to it.
- mkfs leaves the backing file sparse (no discard-then-allocate), and a trim inside a mounted
  volume punches holes in the pool file: st_blocks falls, and the pool's free space comes back.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.capacity import POOL_RESERVE_BYTES
from csi_hostpath.store.pool_layout import PoolLayout
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.support.kernel import is_root
from tests.support.needs import fs_available

pytestmark = pytest.mark.skipif(not is_root(), reason="mounts a tmpfs and loop devices: needs root")
MiB = 1 << 20
POOL_MIB = 400


@pytest.fixture
def pool(workdir: Path) -> Path:
    """A pool filesystem of its own, so free space is this test's alone."""
    root = workdir / "pool"
    root.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={POOL_MIB}m", "tmpfs", str(root)], check=True
    )
    return root  # workdir's cleanup unmounts it


@pytest.fixture
def driver(workdir: Path, pool: Path) -> Iterator[Client]:
    with in_process(workdir, "real", "--pool-dir", str(pool)) as client:
        yield client


def _free(pool: Path) -> int:
    st = os.statvfs(pool)
    return st.f_bavail * st.f_frsize


def _available(client: Client) -> int:
    reply = client.controller.GetCapacity(pb.GetCapacityRequest())
    assert reply.maximum_volume_size.value == reply.available_capacity
    return int(reply.available_capacity)


class Staged:
    def __init__(self, client: Client, workdir: Path, vol: pb.Volume, fs: str) -> None:
        self.client, self.vol = client, vol
        self.cap = h.mount_cap(fs)
        self.staging = workdir / vol.volume_id / "globalmount"
        self.staging.mkdir(parents=True)
        ctx = h.publish(client, vol.volume_id, "node-a", self.cap)
        h.stage(client, vol, self.staging, self.cap, ctx)

    def close(self) -> None:
        h.unstage(self.client, self.vol.volume_id, self.staging)
        h.unpublish(self.client, self.vol.volume_id, "node-a")


@pytest.fixture
def stage(driver: Client, workdir: Path) -> Iterator[object]:
    opened: list[Staged] = []

    def _stage(vol: pb.Volume, fs: str) -> Staged:
        opened.append(Staged(driver, workdir, vol, fs))
        return opened[-1]

    yield _stage
    for s in reversed(opened):
        s.close()


def _write(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        chunk = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())


def test_a_real_pool_promises_free_space_less_what_volumes_may_grow_into(
    driver: Client, pool: Path, stage: object
) -> None:
    before = _available(driver)
    # Nothing promised yet: the free space, less the reserve (the pool's own files are small).
    assert 0 <= (_free(pool) - POOL_RESERVE_BYTES) - before < MiB
    vol = h.create(driver, "a", h.mount_cap("ext4"), 32 * MiB)
    assert abs((before - _available(driver)) - 32 * MiB) < MiB
    # Writing into the volume moves bytes from "free" to "written", not out of the promise.
    staged = stage(vol, "ext4")  # type: ignore[operator]
    _write(staged.staging / "data", 12 * MiB)
    backing = PoolLayout(pool).volume_file(vol.volume_id)
    assert os.stat(backing).st_blocks * 512 >= 12 * MiB
    assert abs((before - _available(driver)) - 32 * MiB) < 2 * MiB
    # The rest of the pool is promised to a second volume; a third finds nothing left.
    # (sizes round up to whole MiB, so the promise is taken in MiB)
    h.create(driver, "b", h.mount_cap("ext4"), _available(driver) // MiB * MiB)
    assert _available(driver) < MiB
    h.expect_code(
        grpc.StatusCode.RESOURCE_EXHAUSTED, h.create, driver, "c", h.mount_cap("ext4"), MiB
    )


FILESYSTEMS = [fs for fs in ("ext4", "xfs") if fs_available(fs)]


@pytest.mark.parametrize("fs", FILESYSTEMS)
def test_mkfs_keeps_the_file_sparse_and_a_trim_gives_space_back(
    driver: Client, pool: Path, stage: object, fs: str
) -> None:
    size = (300 if fs == "xfs" else 64) * MiB  # xfs refuses anything under 300 MiB
    vol = h.create(driver, f"trim-{fs}", h.mount_cap(fs), size)
    backing = PoolLayout(pool).volume_file(vol.volume_id)
    staged = stage(vol, fs)  # type: ignore[operator]
    formatted = os.stat(backing).st_blocks * 512
    # mkfs wrote metadata only, no discard-then-zero of the whole device (measured: ext4 0.4 MiB
    # of 64 MiB; xfs 64 MiB of 300 MiB, its log, which mkfs.xfs writes whole, -K or not).
    assert formatted < size // 4, f"{fs}: {formatted} of {size} bytes allocated after mkfs"
    _write(staged.staging / "data", 24 * MiB)
    written = os.stat(backing).st_blocks * 512
    assert written >= formatted + 20 * MiB
    free_full = _free(pool)
    (staged.staging / "data").unlink()
    # xfs frees an unlinked file's extents in a background worker (inodegc), so one fstrim
    # may run before they are free: trim again until the space comes back, a few times at most.
    for _ in range(20):
        os.sync()
        subprocess.run(["fstrim", str(staged.staging)], check=True, capture_output=True)
        trimmed = os.stat(backing).st_blocks * 512
        if written - trimmed >= 20 * MiB:
            break
        time.sleep(0.25)
    assert written - trimmed >= 20 * MiB, f"{fs}: {written} -> {trimmed} after fstrim"
    assert _free(pool) - free_full >= 20 * MiB


def test_create_volume_measures_only_the_volumes_that_changed(
    driver: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thin rule needs every volume's allocation; a stat of each on every CreateVolume cost
    25 ms with 2,000 volumes. Unchanged volumes are counted from a cache."""
    from csi_hostpath.system.linux.linux_pool import LinuxPool

    for n in range(30):
        h.create(driver, f"idle-{n}", h.block_cap(), MiB)
    _available(driver)
    measured: list[Path] = []
    allocated = LinuxPool.allocated

    def counting(self: LinuxPool, path: Path) -> int:
        measured.append(path)
        return allocated(self, path)

    monkeypatch.setattr(LinuxPool, "allocated", counting)
    h.create(driver, "one-more", h.block_cap(), MiB)
    _available(driver)
    assert len(measured) <= 2, measured  # the new volume, once


def test_a_trim_in_a_held_volume_lets_nothing_be_promised_twice(
    driver: Client, pool: Path, stage: object
) -> None:
    """The cache counted the volume's written bytes; a trim gives them back to free space, where
    a cached count would count them twice."""
    vol = h.create(driver, "t", h.mount_cap("ext4"), 64 * MiB)
    staged = stage(vol, "ext4")  # type: ignore[operator]
    _write(staged.staging / "data", 32 * MiB)
    room = _available(driver)  # measured now, 32 MiB written
    backing = PoolLayout(pool).volume_file(vol.volume_id)
    written = os.stat(backing).st_blocks * 512
    (staged.staging / "data").unlink()
    os.sync()
    subprocess.run(["fstrim", str(staged.staging)], check=True, capture_output=True)
    assert written - os.stat(backing).st_blocks * 512 >= 24 * MiB  # back in the pool's free space
    h.expect_code(
        grpc.StatusCode.RESOURCE_EXHAUSTED, h.create, driver, "x", h.block_cap(), room + 16 * MiB
    )
    h.create(driver, "y", h.block_cap(), room - MiB)


def test_a_write_in_a_held_volume_takes_nothing_from_what_can_be_promised(
    driver: Client, stage: object
) -> None:
    vol = h.create(driver, "w", h.mount_cap("ext4"), 64 * MiB)
    staged = stage(vol, "ext4")  # type: ignore[operator]
    room = _available(driver)
    _write(staged.staging / "data", 32 * MiB)  # after the volume's allocation was counted
    h.create(driver, "all-of-it", h.block_cap(), room // MiB * MiB)
    h.expect_code(grpc.StatusCode.RESOURCE_EXHAUSTED, h.create, driver, "more", h.block_cap(), MiB)
