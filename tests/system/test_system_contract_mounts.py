"""The system layer's mount contract (mount, bind, find, unmount, lazy, stacked), fake and real.

Whatever passes here on "fake" must pass on "real": that is what lets the service tests trust the
fake. Assertions only the real kernel can make (EROFS) are guarded by ``env.real``.
"""

from __future__ import annotations

import errno
import os

import pytest

from csi_hostpath.system.base import CommandError, ResourceBusy

from .conftest import Env
from .system_limits import EXT4_SIZE, MiB


def test_mount_bind_unmount(env: Env) -> None:
    mounts = env.system.mounts
    device, staging = env.mounted("vol", EXT4_SIZE)

    entry = mounts.find(staging)
    assert entry is not None
    assert entry.mount_point == staging
    assert entry.source == device.path
    assert entry.fs_type == "ext4"
    assert entry.root == "/"
    assert "rw" in entry.options
    assert entry in mounts.list()

    stats = env.system.fs.stats(staging)
    assert 0 < stats.available_bytes <= stats.total_bytes <= EXT4_SIZE
    assert stats.total_inodes > 0
    assert stats.used_inodes <= stats.total_inodes

    os.mkdir(os.path.join(staging, "data"))
    with open(os.path.join(staging, "data", "file"), "wb") as handle:
        handle.write(b"hello")

    writable = env.dir("writable")
    mounts.bind(staging, writable, read_only=False)
    bound = mounts.find(writable)
    assert bound is not None
    assert bound.device_number == entry.device_number
    assert "rw" in bound.options

    read_only = env.dir("read-only")
    mounts.bind(os.path.join(staging, "data"), read_only, read_only=True)
    ro_entry = mounts.find(read_only)
    assert ro_entry is not None
    assert "ro" in ro_entry.options
    assert ro_entry.root == "/data"
    assert ro_entry.device_number == entry.device_number
    if env.real:
        with open(os.path.join(read_only, "file"), "rb") as handle:
            assert handle.read() == b"hello"
        with pytest.raises(OSError) as refused, open(os.path.join(read_only, "new"), "wb"):
            pass
        assert refused.value.errno == errno.EROFS

    for target in (read_only, writable, staging):
        mounts.unmount(target)
        assert mounts.find(target) is None
        mounts.unmount(target)  # not mounted any more: fine
    mounts.unmount(os.path.join(env.work, "never-existed"))


def test_mount_point_with_awkward_characters(env: Env) -> None:
    device = env.formatted("vol", EXT4_SIZE)
    target = env.dir("with space\tand\\backslash")
    env.system.mounts.mount(device.path, target, "ext4", ["noatime"])
    entry = env.system.mounts.find(target)
    assert entry is not None
    assert entry.mount_point == target
    assert "noatime" in entry.options
    env.system.mounts.unmount(target)
    assert env.system.mounts.find(target) is None


def test_mount_read_only_option(env: Env) -> None:
    device = env.formatted("vol", EXT4_SIZE)
    target = env.dir("ro")
    env.system.mounts.mount(device.path, target, "ext4", ["ro"])
    entry = env.system.mounts.find(target)
    assert entry is not None
    assert "ro" in entry.options


def test_mount_misuse(env: Env) -> None:
    mounts = env.system.mounts
    device = env.formatted("vol", EXT4_SIZE)
    blank = env.attach("blank", EXT4_SIZE)
    target = env.dir("target")
    missing = os.path.join(env.work, "missing")
    with pytest.raises(CommandError):
        mounts.mount(os.path.join(env.work, "no-such-device"), target, "ext4", [])
    with pytest.raises(CommandError):
        mounts.mount(device.path, missing, "ext4", [])
    with pytest.raises(CommandError):
        mounts.mount(device.path, target, "xfs", [])
    with pytest.raises(CommandError):
        mounts.mount(blank.path, target, "ext4", [])
    with pytest.raises(CommandError):
        mounts.bind(missing, target, read_only=False)
    with pytest.raises(CommandError):
        mounts.bind(target, missing, read_only=True)
    a_file = env.work / "a-file"
    a_file.touch()
    with pytest.raises(CommandError):
        mounts.bind(target, str(a_file), read_only=False)
    assert [e for e in mounts.list() if e.mount_point.startswith(str(env.work))] == []


def test_block_device_bind(env: Env) -> None:
    device = env.attach("vol", 8 * MiB)
    target = env.work / "block-target"
    target.touch()
    env.system.mounts.bind(device.path, str(target), read_only=False)
    entry = env.system.mounts.find(str(target))
    assert entry is not None
    assert entry.root.endswith("/" + os.path.basename(device.path))
    assert env.system.devices.is_node(str(target), device.path)
    # A directory that merely has the device's name is not the device.
    lookalike = env.dir(os.path.basename(device.path))
    other = env.dir("other-target")
    env.system.mounts.bind(lookalike, other, read_only=False)
    assert not env.system.devices.is_node(other, device.path)
    env.system.mounts.unmount(other)
    env.system.mounts.unmount(str(target))
    assert env.system.mounts.find(str(target)) is None
    assert not env.system.devices.is_node(str(target), device.path)
    # Binding the node did not open the device: it detaches at once.
    env.system.loop.detach(device)
    assert env.system.loop.find(env.tag("vol")) is None


def test_unmount_busy_parent_needs_lazy(env: Env) -> None:
    mounts = env.system.mounts
    _, staging = env.mounted("vol", EXT4_SIZE)
    child = os.path.join(staging, "child")
    os.mkdir(child)
    mounts.bind(env.dir("elsewhere"), child, read_only=False)
    with pytest.raises(ResourceBusy) as busy:  # typed by the kernel's EBUSY, not by umount's words
        mounts.unmount(staging)
    assert busy.value.errno == errno.EBUSY
    assert mounts.find(staging) is not None
    mounts.unmount(staging, lazy=True)
    assert mounts.find(staging) is None
    assert mounts.find(child) is None


def test_find_returns_topmost_of_stacked_mounts(env: Env) -> None:
    mounts = env.system.mounts
    target = env.dir("target")
    mounts.bind(env.dir("first"), target, read_only=False)
    mounts.bind(env.dir("second"), target, read_only=True)
    top = mounts.find(target)
    assert top is not None
    assert top.root.endswith("/second")
    assert "ro" in top.options
    mounts.unmount(target)
    below = mounts.find(target)
    assert below is not None
    assert below.root.endswith("/first")
    mounts.unmount(target)
    assert mounts.find(target) is None
