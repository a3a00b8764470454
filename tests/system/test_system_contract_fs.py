"""The system layer's filesystem contract (probe, mkfs, grow, freeze, shutdown), fake and real.

Whatever passes here on "fake" must pass on "real": that is what lets the service tests trust the
fake. Assertions only the real kernel can make (EIO) are guarded by ``env.real``.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from csi_hostpath.system.base import CommandError
from tests.support.needs import FS_TOOLS, skip_unless_tools

from .conftest import Env
from .system_limits import CAP_SYS_RESOURCE, EXT4_SIZE, XFS_SIZE, MiB, has_capability


@pytest.mark.parametrize(("fs_type", "size"), [("ext4", EXT4_SIZE), ("xfs", XFS_SIZE)])
def test_probe_mkfs_probe(env: Env, fs_type: str, size: int) -> None:
    if env.real:
        skip_unless_tools(*FS_TOOLS[fs_type])
    device = env.attach("vol", size)
    assert env.system.fs.probe(device.path) is None
    env.system.fs.mkfs(device.path, fs_type)
    assert env.system.fs.probe(device.path) == fs_type
    # The filesystem lives in the file: a fresh attachment still sees it.
    env.system.loop.detach(device)
    again = env.system.loop.attach(Path(device.backing_file), env.tag("again"))
    assert env.system.fs.probe(again.path) == fs_type


def test_copied_volume_keeps_its_filesystem(env: Env) -> None:
    device = env.formatted("vol", EXT4_SIZE)
    env.system.loop.detach(device)
    copy = env.pool_dir / "copy"
    env.system.pool.copy_sparse(Path(device.backing_file), copy)
    clone = env.system.loop.attach(copy, env.tag("copy"))
    assert env.system.fs.probe(clone.path) == "ext4"


def test_fs_misuse(env: Env) -> None:
    fs = env.system.fs
    device = env.attach("small", 64 * MiB)
    with pytest.raises(ValueError):
        fs.mkfs(device.path, "vfat")
    with pytest.raises(CommandError):
        fs.mkfs(device.path, "xfs")  # too small for xfs
    with pytest.raises(FileNotFoundError):
        fs.probe(str(env.work / "no-such-device"))
    with pytest.raises(ValueError):
        fs.grow(device.path, env.work.as_posix(), "vfat")
    fs.mkfs(device.path, "ext4")
    env.system.mounts.mount(device.path, env.dir("mnt"), "ext4", [])
    with pytest.raises(CommandError):
        fs.mkfs(device.path, "ext4")  # never under a mounted filesystem


@pytest.mark.parametrize(("fs_type", "size"), [("ext4", EXT4_SIZE), ("xfs", XFS_SIZE)])
def test_grow_mounted_filesystem(env: Env, fs_type: str, size: int) -> None:
    if env.real:
        skip_unless_tools(*FS_TOOLS[fs_type])
    if env.real and fs_type == "ext4" and not has_capability(CAP_SYS_RESOURCE):
        # EXT4_IOC_RESIZE_FS checks CAP_SYS_RESOURCE; resize2fs reports "Permission denied".
        pytest.skip("online ext4 resize needs CAP_SYS_RESOURCE, which this process lacks")
    device, target = env.mounted("vol", size, fs_type)
    before = env.system.fs.stats(target)
    assert 0 < before.total_bytes <= size
    env.system.pool.grow(Path(device.backing_file), 2 * size)
    env.system.loop.refresh_capacity(device.path)
    assert env.system.devices.size(device.path) == 2 * size
    env.system.fs.grow(device.path, target, fs_type)
    after = env.system.fs.stats(target)
    assert after.total_bytes > before.total_bytes + size // 2
    assert after.total_bytes <= 2 * size


def test_freeze_and_thaw(env: Env) -> None:
    _, target = env.mounted("vol", EXT4_SIZE)
    fs = env.system.fs
    fs.freeze(target)
    with pytest.raises(OSError) as frozen_twice:
        fs.freeze(target)
    assert frozen_twice.value.errno == errno.EBUSY
    fs.thaw(target)
    with pytest.raises(OSError) as thawed_twice:
        fs.thaw(target)
    assert thawed_twice.value.errno == errno.EINVAL


def test_shutdown_then_unmount(env: Env) -> None:
    device, target = env.mounted("vol", EXT4_SIZE)
    kept = os.open(os.path.join(target, "kept"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(kept, b"before")
        env.system.fs.shutdown(target)
        env.system.fs.shutdown(target)  # a retried fence is fine
        if env.real:
            with pytest.raises(OSError) as open_file:
                os.write(kept, b"after")
                os.fsync(kept)
            assert open_file.value.errno == errno.EIO
            with pytest.raises(OSError) as new_file, open(os.path.join(target, "new"), "wb"):
                pass
            assert new_file.value.errno == errno.EIO
        else:
            assert env.kernel is not None
            assert env.kernel.is_shut_down(target)
    finally:
        os.close(kept)
    env.system.mounts.unmount(target)
    assert env.system.mounts.find(target) is None
    # The journal recovers: the volume mounts again and takes writes.
    env.system.mounts.mount(device.path, target, "ext4", [])
    with open(os.path.join(target, "again"), "wb") as handle:
        handle.write(b"ok")
    if env.kernel is not None:
        assert not env.kernel.is_shut_down(target)


def test_shutdown_and_freeze_refuse_a_path_that_is_not_a_loop_mount(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env.real:
        # If the guard failed, the ioctl would hit the host's own filesystem: never let it run.
        def refuse(*args: object) -> None:
            raise AssertionError(f"ioctl reached the kernel: {args}")

        monkeypatch.setattr(fcntl, "ioctl", refuse)
    for call in (env.system.fs.shutdown, env.system.fs.freeze, env.system.fs.thaw):
        with pytest.raises(ValueError):
            call(env.work.as_posix())
