"""An in-process twin of the Linux system layer, for fast unit tests without root.

What is real and what is pretended:

- Pool files are real sparse files under the pool root (cheap, and it keeps sizes, holes and
  copies honest). Only the pool filesystem's capacity is pretended: ``capacity_bytes``. Like the
  real pool it is thin: creating or growing a file raises NoSpace only when the file alone could
  never fit, and copies raise NoSpace when their data does not fit in what is left.
- Loop devices are entries in a :class:`FakeKernel` named ``/dev/fakeloopN``. Each holds its
  backing file open, so a removed backing file keeps working, as with the real kernel.
- A "filesystem" is a small header written at the start of the backing file, so it travels with
  the data: a re-attached or copied file still probes as what it was formatted with.
- Mounts are records in the kernel; target directories and files must really exist.

Misuse fails the way the real layer fails (a missing device or target → CommandError, a bad fs type
→ ValueError, an unconfigured loop device → OSError(ENXIO)), so services behave alike on both.
Several fake systems may share one FakeKernel, like node plugins on one machine.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from csi_hostpath.system.base import (
    CommandError,
    FsStats,
    Holder,
    LoopCensus,
    LoopDevice,
    NoSpace,
    System,
)
from csi_hostpath.system.fake.fake_kernel import (
    _BYTES_PER_INODE,
    _MKFS_EXIT,
    _SUPPORTED_FS,
    _XFS_MIN_BYTES,
    FAKE_LOOP_PREFIX,
    FakeKernel,
    _Device,
    _enxio,
    _fake_index,
    _FsHeader,
)
from csi_hostpath.system.fake.fake_mounts import FakeMounts
from csi_hostpath.system.iolimits import FakeIoTuner
from csi_hostpath.system.linux.fs import statvfs_stats
from csi_hostpath.system.linux.linux_pool import LinuxPool
from csi_hostpath.system.linux.loop_ioctl import encode_tag
from csi_hostpath.system.system_errors import NotPermitted

# The kernel and the mounts live in fake_kernel.py and fake_mounts.py; callers import from here.
__all__ = [
    "FAKE_LOOP_PREFIX",
    "FakeDevices",
    "FakeFs",
    "FakeKernel",
    "FakeLoop",
    "FakeMounts",
    "FakePool",
    "fake_system",
]

# --- pool ----------------------------------------------------------------------------------------


class FakePool:
    def __init__(self, root: Path, *, capacity_bytes: int = 1 << 40) -> None:
        # Real files, without fsync: durability is not what unit tests measure.
        self._files = LinuxPool(root, durable=False)
        self._capacity = capacity_bytes

    @property
    def root(self) -> Path:
        return self._files.root

    def _used(self) -> int:
        used = 0
        for directory, _, names in os.walk(self.root):
            for name in names:
                try:
                    used += os.lstat(os.path.join(directory, name)).st_blocks * 512
                except FileNotFoundError:
                    continue
        return used

    def _check_fits(self, path: Path, size_bytes: int) -> None:
        if size_bytes > self._capacity:
            raise NoSpace(f"{path}: {size_bytes} bytes exceed the pool's {self._capacity}")

    def create(self, path: Path, size_bytes: int) -> None:
        if self._files.size(path) != size_bytes:
            self._check_fits(path, size_bytes)
        self._files.create(path, size_bytes)

    def remove(self, path: Path) -> None:
        self._files.remove(path)

    def size(self, path: Path) -> int | None:
        return self._files.size(path)

    def allocated(self, path: Path) -> int:
        return self._files.allocated(path)

    def grow(self, path: Path, size_bytes: int) -> None:
        current = self._files.size(path)
        if current is not None and size_bytes > current:
            self._check_fits(path, size_bytes)
        self._files.grow(path, size_bytes)

    def copy_sparse(self, source: Path, dest: Path) -> None:
        needed = self._files.allocated(source)
        if needed > self.free_bytes():
            raise NoSpace(f"copy of {source} needs {needed} bytes, {self.free_bytes()} free")
        self._files.copy_sparse(source, dest)

    def free_bytes(self) -> int:
        return max(0, self._capacity - self._used())

    def writable(self) -> bool | None:
        return True


# --- loop ----------------------------------------------------------------------------------------


class FakeLoop:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        encode_tag(tag)
        with self._kernel.lock:
            existing = self.find(tag)
            if existing is not None:
                # A detach waiting on another holder is cancelled, as on the real kernel.
                held = self._kernel.device(existing.path)
                assert held is not None
                held.autoclear = False
                return existing
            mode = os.O_RDONLY if read_only else os.O_RDWR
            fd = os.open(backing_file, mode | os.O_CLOEXEC)
            device = _Device(
                index=self._kernel.free_index(),
                fd=fd,
                backing_path=os.path.realpath(backing_file),
                tag=tag,
                attached_read_only=read_only,
                size_bytes=os.fstat(fd).st_size // 512 * 512,  # a loop device is whole sectors
            )
            self._kernel.add_device(device)
            return self._kernel.describe(device)

    def find(self, tag: str) -> LoopDevice | None:
        with self._kernel.lock:
            for index in sorted(self._kernel.devices):
                device = self._kernel.devices[index]
                if device.tag == tag:
                    return self._kernel.describe(device)
        return None

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        with self._kernel.lock:
            return [
                self._kernel.describe(self._kernel.devices[index])
                for index in sorted(self._kernel.devices)
                if self._kernel.devices[index].tag.startswith(tag_prefix)
            ]

    def census(self, tag_prefix: str) -> LoopCensus:
        # A fake device exists only while it is attached: none sits unbound.
        with self._kernel.lock:
            tags = [d.tag for d in self._kernel.devices.values()]
        ours = sum(1 for tag in tags if tag.startswith(tag_prefix))
        return LoopCensus(len(tags), len(tags), ours, self._kernel.loop_ceiling)

    def detach(self, device: LoopDevice) -> None:
        _fake_index(device.path)
        with self._kernel.lock:
            found = self._kernel.device(device.path)
            if found is None:
                return
            st = os.fstat(found.fd)
            if (found.tag, st.st_dev, st.st_ino) != (
                device.tag,
                device.backing_dev,
                device.backing_inode,
            ):
                return  # the number serves another attach now: ours is gone already
            found.blkro = False
            if self._kernel.in_use(found):
                found.autoclear = True
            else:
                self._kernel.drop_device(found)

    def _configured(self, device: str) -> _Device:
        _fake_index(device)
        found = self._kernel.device(device)
        if found is None:
            raise _enxio(device)
        return found

    def refresh_capacity(self, device: str) -> None:
        with self._kernel.lock:
            found = self._configured(device)
            found.size_bytes = os.fstat(found.fd).st_size // 512 * 512

    def set_read_only(self, device: str, read_only: bool) -> None:
        with self._kernel.lock:
            self._configured(device).blkro = read_only

    def holders(self, device: str) -> tuple[Holder, ...]:
        index = _fake_index(device)
        with self._kernel.lock:
            return tuple(self._kernel.device_users(index))

    def watch(self, changed: Callable[[str], None]) -> Callable[[], None]:
        with self._kernel.lock:
            self._kernel.watchers.append(changed)

        def stop() -> None:
            with self._kernel.lock:
                if changed in self._kernel.watchers:
                    self._kernel.watchers.remove(changed)

        return stop


# --- filesystems ---------------------------------------------------------------------------------


class FakeFs:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def probe(self, device: str) -> str | None:
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), device)
            header = self._kernel.read_fs(found)
            return None if header is None else header.fs_type

    def mkfs(self, device: str, fs_type: str) -> None:
        if fs_type not in _SUPPORTED_FS:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")
        argv = [f"mkfs.{fs_type}", device]
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                raise CommandError(argv, _MKFS_EXIT, "", f"The file {device} does not exist")
            if found.read_only:
                raise CommandError(argv, _MKFS_EXIT, "", f"{device}: Read-only file system")
            if self._kernel.in_use(found):
                raise CommandError(argv, _MKFS_EXIT, "", f"{device} is mounted")
            if fs_type == "xfs" and found.size_bytes < _XFS_MIN_BYTES:
                raise CommandError(argv, _MKFS_EXIT, "", "Filesystem must be larger than 300MB.")
            self._kernel.write_fs(found, _FsHeader(fs_type, found.size_bytes))

    def grow(self, device: str, mount_point: str, fs_type: str) -> None:
        if fs_type not in _SUPPORTED_FS:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")
        with self._kernel.lock:
            if fs_type == "ext4":
                argv = ["resize2fs", device]
                found = self._kernel.device(device)
            else:
                argv = ["xfs_growfs", mount_point]
                mount = self._kernel.topmost(os.path.realpath(mount_point))
                holder = None if mount is None else mount.holds
                found = None if holder is None else self._kernel.devices.get(holder)
            header = None if found is None else self._kernel.read_fs(found)
            if found is None or header is None or header.fs_type != fs_type:
                raise CommandError(argv, 1, "", f"no {fs_type} filesystem to grow there")
            growing = header.size_bytes < found.size_bytes
            if fs_type == "ext4" and growing and not self._kernel.cap_sys_resource:
                argv = ["EXT4_IOC_RESIZE_FS", mount_point]
                raise NotPermitted(argv, None, "", "", errno=errno.EPERM)
            self._kernel.write_fs(found, _FsHeader(fs_type, found.size_bytes))

    def size(self, device: str) -> int | None:
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), device)
            header = self._kernel.read_fs(found)
            return None if header is None else header.size_bytes

    def grow_offline(self, device: str, fs_type: str) -> None:
        if fs_type != "ext4":
            raise ValueError(f"offline grow is for ext4 only, not {fs_type!r}")
        with self._kernel.lock:
            found = self._kernel.device(device)
            header = None if found is None else self._kernel.read_fs(found)
            if found is None or header is None or header.fs_type != "ext4":
                raise CommandError(["resize2fs", device], 1, "", "no ext4 filesystem there")
            if self._kernel.in_use(found):
                raise CommandError(["e2fsck", "-f", "-p", device], 8, "", f"{device} is mounted")
            self._kernel.write_fs(found, _FsHeader("ext4", found.size_bytes))

    def error_count(self, device: str) -> int:
        with self._kernel.lock:
            found = self._kernel.device(device)
            return 0 if found is None else self._kernel.fs_errors.get(found.index, 0)

    def stats(self, path: str) -> FsStats:
        with self._kernel.lock:
            mount = self._kernel.containing(os.path.realpath(path))
            found = None
            if mount is not None and mount.holds is not None:
                found = self._kernel.devices.get(mount.holds)
            header = None if found is None else self._kernel.read_fs(found)
        if header is None:
            # Not on a fake filesystem (a host directory, a block volume's device node): the host
            # answers, as statvfs would.
            return statvfs_stats(path)
        inodes = header.size_bytes // _BYTES_PER_INODE
        return FsStats(
            total_bytes=header.size_bytes,
            available_bytes=header.size_bytes,
            used_bytes=0,
            total_inodes=inodes,
            free_inodes=inodes,
            used_inodes=0,
        )

    def _mounted_device(self, mount_point: str) -> int:
        mount = self._kernel.topmost(os.path.realpath(mount_point))
        if mount is None or mount.holds is None:
            raise ValueError(f"{mount_point} is not a mount of a loop device")
        return mount.holds

    def shutdown(self, mount_point: str) -> None:
        with self._kernel.lock:
            self._kernel.shut_down.add(self._mounted_device(mount_point))

    def freeze(self, mount_point: str) -> None:
        with self._kernel.lock:
            index = self._mounted_device(mount_point)
            if index in self._kernel.frozen:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), mount_point)
            self._kernel.frozen.add(index)

    def thaw(self, mount_point: str) -> None:
        with self._kernel.lock:
            index = self._mounted_device(mount_point)
            if index not in self._kernel.frozen:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), mount_point)
            self._kernel.frozen.discard(index)


# --- devices -------------------------------------------------------------------------------------


class FakeDevices:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def size(self, device: str) -> int:
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is not None:
                return found.size_bytes
        if os.path.exists(device):
            raise OSError(errno.ENOTTY, os.strerror(errno.ENOTTY), device)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), device)

    def is_node(self, path: str, device: str) -> bool:
        # The fake has no device nodes: the node at path is the device when the kernel's
        # topmost mount there is a bind of that device (FakeMounts.bind records it so).
        with self._kernel.lock:
            mount = self._kernel.topmost(os.path.realpath(path))
            known = self._kernel.device(device)
            return (
                mount is not None
                and known is not None
                and mount.holds is None
                and mount.entry.fs_type == "devtmpfs"
                and mount.entry.root == "/" + os.path.basename(known.path)
            )


def fake_system(
    pool_root: Path, *, capacity_bytes: int = 1 << 40, kernel: FakeKernel | None = None
) -> System:
    """A System on a FakeKernel; pass one kernel to several systems to model nodes sharing it."""
    shared = FakeKernel() if kernel is None else kernel
    return System(
        pool=FakePool(pool_root, capacity_bytes=capacity_bytes),
        loop=FakeLoop(shared),
        fs=FakeFs(shared),
        mounts=FakeMounts(shared),
        devices=FakeDevices(shared),
        io=FakeIoTuner(),
    )
