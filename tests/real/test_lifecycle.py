"""The full volume lifecycle on real loop devices, through a real gRPC server."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.support import helpers as h
from tests.support.kernel import mounts_under, released_after_teardown
from tests.support.needs import needs_fs

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
    # Removed and made again, as kubelet does around NodeUnstage and NodeStage.
    assert not released_after_teardown(workdir, staging), "unstage detaches the loop device"
    staging.mkdir()

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
    assert not released_after_teardown(workdir, staging)
    assert not mounts_under(workdir)


@pytest.mark.parametrize(
    ("fs_type", "size"),
    [("ext4", 64 * MiB), pytest.param("xfs", 320 * MiB, marks=needs_fs("xfs"))],
    ids=["ext4", "xfs"],
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


@pytest.mark.parametrize("kind", ["block", "ext4"])
def test_a_readers_stage_cannot_write_the_device(driver: Client, workdir: Path, kind: str) -> None:
    """A read-only bind of a block device still opens for writing, and a read-only ext4 mount
    still replays its journal: a reader's loop device itself must be read-only."""
    mode = h.Mode.MULTI_NODE_SINGLE_WRITER if kind == "block" else h.Mode.MULTI_NODE_READER_ONLY
    cap = h.block_cap(mode) if kind == "block" else h.mount_cap("ext4", mode=mode)
    staging, target = workdir / "st", workdir / "tg"
    staging.mkdir()
    if kind == "ext4":
        blank = h.create(driver, "blank", cap, 32 * MiB)
        ctx = h.publish(driver, blank.volume_id, "node-a", cap, readonly=True)
        err = h.expect_code(
            grpc.StatusCode.FAILED_PRECONDITION, h.stage, driver, blank, staging, cap, ctx
        )
        assert "no filesystem yet" in (err.details() or "")
        h.unpublish(driver, blank.volume_id, "node-a")
        # A reader volume is normally made from data: clone one a writer filled.
        writer = h.mount_cap("ext4")
        src = h.create(driver, "src", writer, 32 * MiB)
        wctx = h.publish(driver, src.volume_id, "node-a", writer)
        h.stage(driver, src, staging, writer, wctx)
        (staging / "data").write_text("for readers")
        h.unstage(driver, src.volume_id, staging)
        h.unpublish(driver, src.volume_id, "node-a")
        vol = driver.controller.CreateVolume(
            pb.CreateVolumeRequest(
                name="reader-ext4",
                volume_capabilities=[cap],
                volume_content_source=pb.VolumeContentSource(
                    volume=pb.VolumeContentSource.VolumeSource(volume_id=src.volume_id)
                ),
            )
        ).volume
    else:
        vol = h.create(driver, "reader-block", cap, 32 * MiB)
    backing = workdir / "drv-state" / "pool" / "volumes" / f"{vol.volume_id}.img"
    before = backing.read_bytes()
    ctx = h.publish(driver, vol.volume_id, "node-a", cap, readonly=True)
    assert ctx["readonly"] == "true"
    h.stage(driver, vol, staging, cap, ctx)
    h.node_publish(driver, vol.volume_id, staging, target, cap, readonly=True)
    with pytest.raises(OSError) as info:
        if kind == "ext4":
            assert (target / "data").read_text() == "for readers"
            (target / "new").write_text("no")
        else:
            fd = os.open(target, os.O_WRONLY)
            try:
                os.write(fd, b"x" * 4096)
                os.fsync(fd)
            finally:
                os.close(fd)
    assert info.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
    h.node_unpublish(driver, vol.volume_id, target)
    h.unstage(driver, vol.volume_id, staging)
    assert backing.read_bytes() == before, "the reader wrote nothing, not even a journal replay"
    assert not released_after_teardown(workdir, staging)
