"""The system-layer contract, run against both the fake and the real kernel.

Whatever passes here on "fake" must pass on "real": that is what lets the service tests trust the
fake. Assertions only the real kernel can make (EROFS, EIO, sysfs) are guarded by ``env.real``.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from csi_hostpath.system.base import CommandError, NoSpace, ResourceBusy
from csi_hostpath.system.extents import data_extents
from tests.needs import FS_TOOLS, skip_unless_tools

from .conftest import Env

MiB = 1 << 20
GiB = 1 << 30
EXT4_SIZE = 64 * MiB
XFS_SIZE = 512 * MiB  # mkfs.xfs refuses anything below 300 MiB
MAX_TAG_BYTES = 63  # lo_file_name is 64 bytes with its NUL


CAP_SYS_RESOURCE = 24


def _has_capability(number: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> number & 1)
    return False


def _sysfs_ro(device: str) -> str:
    return Path(f"/sys/block/{os.path.basename(device)}/ro").read_text().strip()


# --- pool ----------------------------------------------------------------------------------------


def test_pool_create_grow_remove(env: Env) -> None:
    pool = env.system.pool
    path = env.pool_dir / "vol"
    assert pool.size(path) is None
    assert pool.allocated(path) == 0

    pool.create(path, 64 * MiB)
    assert pool.size(path) == 64 * MiB
    assert pool.allocated(path) < MiB  # sparse
    pool.create(path, 64 * MiB)  # same size again: nothing to do
    with pytest.raises(FileExistsError):
        pool.create(path, 32 * MiB)

    pool.grow(path, 128 * MiB)
    assert pool.size(path) == 128 * MiB
    pool.grow(path, 16 * MiB)  # never shrinks
    assert pool.size(path) == 128 * MiB

    pool.remove(path)
    assert pool.size(path) is None
    assert pool.allocated(path) == 0
    pool.remove(path)  # already gone: fine
    assert sorted(os.listdir(env.pool_dir)) == []  # no temporary left behind


def test_pool_grow_missing_file(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.pool.grow(env.pool_dir / "missing", MiB)


def test_pool_file_too_big_is_no_space(env: Env) -> None:
    # Beyond ext4's largest file on the real pool, beyond the fake's capacity on the fake.
    with pytest.raises(NoSpace):
        env.system.pool.create(env.pool_dir / "huge", 1 << 60)
    assert os.listdir(env.pool_dir) == []


def test_pool_free_bytes(env: Env) -> None:
    assert env.system.pool.free_bytes() > 0


def test_copy_sparse_keeps_holes_and_data(env: Env) -> None:
    pool = env.system.pool
    source = env.pool_dir / "source"
    pool.create(source, GiB)
    chunks = {0: b"a", 300 * MiB: b"b", GiB - 2 * MiB: b"c"}
    lengths = {0: MiB, 300 * MiB: MiB, GiB - 2 * MiB: 2 * MiB}
    with open(source, "r+b") as handle:
        for offset, byte in chunks.items():
            handle.seek(offset)
            handle.write(byte * lengths[offset])

    dest = env.pool_dir / "copy"
    pool.create(dest, MiB)  # an older copy is replaced
    pool.copy_sparse(source, dest)

    assert pool.size(dest) == GiB
    assert 4 * MiB <= pool.allocated(dest) <= 5 * MiB
    # Same data where the source has data, and holes (reading as zeros) everywhere else: compare
    # the data extents and their bytes instead of reading a GiB of holes, which takes tens of
    # seconds on a busy machine and says nothing more.
    assert data_extents(dest) == data_extents(source)
    with open(source, "rb") as left, open(dest, "rb") as right:
        for offset, length in data_extents(source):
            left.seek(offset)
            right.seek(offset)
            assert left.read(length) == right.read(length)
    assert sorted(os.listdir(env.pool_dir)) == ["copy", "source"]


def test_copy_sparse_missing_source_leaves_nothing(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.pool.copy_sparse(env.pool_dir / "missing", env.pool_dir / "copy")
    assert os.listdir(env.pool_dir) == []


# --- loop ----------------------------------------------------------------------------------------


def test_attach_is_idempotent_by_tag(env: Env) -> None:
    backing = env.file("vol", 32 * MiB)
    device = env.system.loop.attach(backing, env.tag("vol"))
    assert device.tag == env.tag("vol")
    assert device.backing_file == str(backing)
    assert device.size_bytes == 32 * MiB
    assert not device.read_only

    assert env.system.loop.attach(backing, env.tag("vol")) == device
    assert env.system.loop.find(env.tag("vol")) == device
    assert env.system.loop.list(env.tag_prefix) == [device]
    assert env.system.devices.size(device.path) == 32 * MiB


def test_list_by_prefix_and_detach(env: Env) -> None:
    loop = env.system.loop
    one = env.attach("one", 8 * MiB)
    two = env.attach("two", 8 * MiB)
    assert one.path != two.path
    assert {d.tag for d in loop.list(env.tag_prefix)} == {env.tag("one"), env.tag("two")}
    assert loop.list(env.tag("tw")) == [two]
    assert loop.list(env.tag_prefix + "nothing") == []
    assert loop.find(env.tag("three")) is None

    loop.detach(one)
    assert loop.find(env.tag("one")) is None
    assert loop.list(env.tag_prefix) == [two]
    loop.detach(one)  # already detached: fine
    loop.detach(two)
    assert loop.list(env.tag_prefix) == []


def test_a_late_detach_leaves_the_device_that_took_the_number_alone(env: Env) -> None:
    """A detach that comes after its device was released (a holder let go between the find and
    the detach) names a number that may serve another attach by now, of any process on the
    kernel: only a device with the detached one's tag and backing file is released."""
    loop = env.system.loop
    one = env.attach("one", 8 * MiB)
    two = env.attach("two", 8 * MiB)
    for stale in (
        dataclasses.replace(one, path=two.path),  # another tag and file on that number
        dataclasses.replace(two, backing_inode=one.backing_inode),  # the tag, another file
        dataclasses.replace(two, tag=one.tag),  # the file, another tag
    ):
        loop.detach(stale)
        assert loop.find(env.tag("two")) == two, stale
    loop.detach(two)  # the teardown checks that both go
    loop.detach(one)


def test_attach_read_only(env: Env) -> None:
    device = env.attach("ro", 8 * MiB, read_only=True)
    assert device.read_only
    with pytest.raises(CommandError):
        env.system.fs.mkfs(device.path, "ext4")
    env.system.loop.detach(device)
    again = env.attach("rw", 8 * MiB)
    assert not again.read_only


def test_detach_clears_read_only_flag(env: Env) -> None:
    loop = env.system.loop
    device = env.attach("vol", 8 * MiB)
    loop.set_read_only(device.path, True)
    found = loop.find(env.tag("vol"))
    assert found is not None
    assert found.read_only
    loop.set_read_only(device.path, False)
    assert not loop.find(env.tag("vol")).read_only  # type: ignore[union-attr]

    loop.set_read_only(device.path, True)
    loop.detach(device)
    if env.real:
        assert _sysfs_ro(device.path) == "0"
    following = env.attach("next", 8 * MiB)
    assert not following.read_only
    env.system.fs.mkfs(following.path, "ext4")  # the flag would make this fail


def test_refresh_capacity(env: Env) -> None:
    backing = env.file("vol", 16 * MiB)
    device = env.system.loop.attach(backing, env.tag("vol"))
    env.system.pool.grow(backing, 48 * MiB)
    assert env.system.devices.size(device.path) == 16 * MiB  # not until told
    env.system.loop.refresh_capacity(device.path)
    assert env.system.devices.size(device.path) == 48 * MiB
    assert env.system.loop.find(env.tag("vol")).size_bytes == 48 * MiB  # type: ignore[union-attr]


def test_tag_rules(env: Env) -> None:
    backing = env.file("vol", 8 * MiB)
    longest = env.tag("x" * (MAX_TAG_BYTES - len(env.tag_prefix)))
    assert len(longest) == MAX_TAG_BYTES
    with pytest.raises(ValueError):
        env.system.loop.attach(backing, longest + "x")
    with pytest.raises(ValueError):
        env.system.loop.attach(backing, "")
    assert env.system.loop.list(env.tag_prefix) == []
    device = env.system.loop.attach(backing, longest)
    assert env.system.loop.find(longest) == device


def test_attach_missing_backing_file(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.loop.attach(env.pool_dir / "missing", env.tag("missing"))


def test_removed_backing_file_keeps_device(env: Env) -> None:
    device = env.attach("vol", 8 * MiB)
    env.system.pool.remove(Path(device.backing_file))
    found = env.system.loop.find(env.tag("vol"))
    assert found is not None
    assert found.backing_file == device.backing_file + " (deleted)"


def test_detach_while_mounted_waits_for_unmount(env: Env) -> None:
    device, target = env.mounted("vol", EXT4_SIZE)
    env.system.loop.detach(device)
    assert env.system.loop.find(env.tag("vol")) is not None  # still in use
    env.system.mounts.unmount(target)
    assert env.system.loop.find(env.tag("vol")) is None


# --- filesystems ---------------------------------------------------------------------------------


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
    if env.real and fs_type == "ext4" and not _has_capability(CAP_SYS_RESOURCE):
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


# --- mounts --------------------------------------------------------------------------------------


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


# --- concurrency ---------------------------------------------------------------------------------


def test_threads_attaching_one_tag_share_one_device(env: Env) -> None:
    backing = env.file("vol", 8 * MiB)
    with ThreadPoolExecutor(max_workers=8) as pool:
        devices = list(
            pool.map(lambda _: env.system.loop.attach(backing, env.tag("vol")), range(8))
        )
    assert len({device.path for device in devices}) == 1
    assert len(env.system.loop.list(env.tag_prefix)) == 1


def test_threads_attaching_many_tags_get_distinct_devices(env: Env) -> None:
    files = [env.file(f"vol-{i}", 8 * MiB) for i in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        devices = list(
            pool.map(lambda i: env.system.loop.attach(files[i], env.tag(f"vol-{i}")), range(6))
        )
    assert len({device.path for device in devices}) == len(files)
    for i, device in enumerate(devices):
        assert device.backing_file == str(files[i])
