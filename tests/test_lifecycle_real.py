"""The full volume lifecycle on real loop devices, through a real gRPC server."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from tests import helpers as h
from tests.conftest import Client
from tests.kernel import loops_backed_under, mounts_under

pytestmark = pytest.mark.real
MiB = h.MiB


def _lifecycle(driver: Client, workdir: Path, cap: object, size: int) -> None:
    block = cap.WhichOneof("access_type") == "block"  # type: ignore[attr-defined]
    vol = h.create(driver, f"life-{'block' if block else 'fs'}", cap, size)  # type: ignore[arg-type]
    assert vol.capacity_bytes >= size
    backing = workdir / "drv-state" / "pool" / "volumes" / f"{vol.volume_id}.img"
    assert backing.stat().st_size == vol.capacity_bytes
    assert backing.stat().st_blocks * 512 < MiB, "the backing file must start sparse"

    ctx = h.publish(driver, vol.volume_id, "node-a", cap)  # type: ignore[arg-type]
    staging = workdir / "kubelet" / "globalmount"
    staging.mkdir(parents=True)
    target = workdir / "pods" / "uid1" / "mount"
    target.parent.mkdir(parents=True)

    h.stage(driver, vol, staging, cap, ctx)  # type: ignore[arg-type]
    h.node_publish(driver, vol.volume_id, staging, target, cap)  # type: ignore[arg-type]
    payload = os.urandom(3 * MiB)
    if block:
        assert target.is_block_device(), "the loop device node is bound onto the target file"
        with open(target, "r+b") as f:
            f.seek(5 * MiB)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
    else:
        assert target.is_dir() and h.mounted(target)
        (target / "data.bin").write_bytes(payload)
        fd = os.open(target / "data.bin", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    h.node_unpublish(driver, vol.volume_id, target)
    assert not target.exists(), "NodeUnpublish removes what NodePublish created"
    h.unstage(driver, vol.volume_id, staging)
    assert not h.mounted(staging)
    assert not loops_backed_under(workdir), "unstage detaches the loop device"

    h.stage(driver, vol, staging, cap, ctx)  # type: ignore[arg-type]
    h.node_publish(driver, vol.volume_id, staging, target, cap)  # type: ignore[arg-type]
    if block:
        with open(target, "rb") as f:
            f.seek(5 * MiB)
            assert hashlib.sha256(f.read(len(payload))).digest() == hashlib.sha256(payload).digest()
    else:
        assert (target / "data.bin").read_bytes() == payload

    h.node_unpublish(driver, vol.volume_id, target)
    h.unstage(driver, vol.volume_id, staging)
    h.unpublish(driver, vol.volume_id, "node-a")
    h.delete(driver, vol.volume_id)
    assert not backing.exists()
    assert not loops_backed_under(workdir)
    assert not mounts_under(workdir)


@pytest.mark.parametrize(
    ("fs_type", "size"), [("ext4", 64 * MiB), ("xfs", 320 * MiB)], ids=["ext4", "xfs"]
)
def test_mount_lifecycle_keeps_data(driver: Client, workdir: Path, fs_type: str, size: int) -> None:
    _lifecycle(driver, workdir, h.mount_cap(fs_type), size)


def test_block_lifecycle_keeps_data(driver: Client, workdir: Path) -> None:
    _lifecycle(driver, workdir, h.block_cap(), 32 * MiB)


def test_default_fs_is_ext4(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("")
    vol = h.create(driver, "default-fs", cap, 32 * MiB)
    assert vol.volume_context["fsType"] == "ext4"


def test_size_limit_is_real_enospc(driver: Client, workdir: Path) -> None:
    """A 32 MiB volume really holds no more than 32 MiB: writing past it fails with ENOSPC."""
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "small", cap, 32 * MiB)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, target = workdir / "st", workdir / "tg"
    staging.mkdir()
    h.stage(driver, vol, staging, cap, ctx)
    h.node_publish(driver, vol.volume_id, staging, target, cap)
    chunk = b"\xab" * MiB
    with pytest.raises(OSError) as info, open(target / "fill", "wb") as f:
        for _ in range(64):
            f.write(chunk)
            f.flush()
        os.fsync(f.fileno())
    assert info.value.errno == errno.ENOSPC
    h.node_unpublish(driver, vol.volume_id, target)
    h.unstage(driver, vol.volume_id, staging)


def test_readonly_publish_refuses_writes(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "ro", cap, 32 * MiB)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, rw, ro = workdir / "st", workdir / "rw", workdir / "ro"
    staging.mkdir()
    h.stage(driver, vol, staging, cap, ctx)
    h.node_publish(driver, vol.volume_id, staging, rw, cap)
    h.node_publish(driver, vol.volume_id, staging, ro, cap, readonly=True)
    (rw / "x").write_text("hello")
    assert (ro / "x").read_text() == "hello"
    with pytest.raises(OSError) as info:
        (ro / "y").write_text("no")
    assert info.value.errno == errno.EROFS
    for t in (rw, ro):
        h.node_unpublish(driver, vol.volume_id, t)
    h.unstage(driver, vol.volume_id, staging)
