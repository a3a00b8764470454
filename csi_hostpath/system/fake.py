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
import json
import os
import posixpath
import re
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from csi_hostpath.system.base import (
    CommandError,
    FsStats,
    LoopDevice,
    MountEntry,
    NoSpace,
    System,
)
from csi_hostpath.system.linux_loop import encode_tag
from csi_hostpath.system.linux_pool import LinuxPool

FAKE_LOOP_PREFIX = "/dev/fakeloop"
_FAKE_LOOP_PATH = re.compile(re.escape(FAKE_LOOP_PREFIX) + r"(\d+)")
_LOOP_MAJOR = 7
_DEVTMPFS_NUMBER = "0:6"

_HEADER_MAGIC = b"CSIHP-FAKEFS\n"
_HEADER_SIZE = 512
_SUPPORTED_FS = ("ext4", "xfs")
_XFS_MIN_BYTES = 300 << 20  # mkfs.xfs (xfsprogs >= 5.19) refuses anything smaller
_BYTES_PER_INODE = 16384  # mke2fs's default inode_ratio; near enough for xfs too
_MOUNT_EXIT = 32  # mount(8)'s "mount failure" exit code
_MKFS_EXIT = 1
# Per-mount flags, in the order the kernel prints them in mountinfo field 6.
_MOUNT_FLAGS = ("nosuid", "nodev", "noexec")
_ATIME_FLAGS = ("noatime", "strictatime", "relatime")


def _fake_index(device: str) -> int:
    match = _FAKE_LOOP_PATH.fullmatch(device)
    if match is None:
        raise ValueError(f"not a fake loop device path: {device!r}")
    return int(match.group(1))


def _enxio(device: str) -> OSError:
    return OSError(errno.ENXIO, os.strerror(errno.ENXIO), device)


def _is_under(path: str, directory: str) -> bool:
    return directory in ("/", path) or path.startswith(directory + "/")


@dataclass(slots=True)
class _Device:
    index: int
    fd: int
    backing_path: str
    tag: str
    attached_read_only: bool
    size_bytes: int
    blkro: bool = False  # set by set_read_only (BLKROSET)
    autoclear: bool = False  # detached while in use: goes when the last mount goes

    @property
    def path(self) -> str:
        return f"{FAKE_LOOP_PREFIX}{self.index}"

    @property
    def read_only(self) -> bool:
        return self.attached_read_only or self.blkro


@dataclass(frozen=True, slots=True)
class _FsHeader:
    fs_type: str
    size_bytes: int


@dataclass(slots=True)
class _Mount:
    entry: MountEntry
    holds: int | None  # index of the fake device whose filesystem this mount keeps busy


def _close_all(fds: set[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


@dataclass
class FakeKernel:
    """What one machine's kernel knows: loop devices, mounts, frozen and shut-down filesystems."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    devices: dict[int, _Device] = field(default_factory=dict)
    mounts: list[_Mount] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    shut_down: set[int] = field(default_factory=set)
    _fds: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # Tests that never detach must not leak the backing files' descriptors.
        weakref.finalize(self, _close_all, self._fds)

    # -- devices ----------------------------------------------------------------------------------

    def device(self, path: str) -> _Device | None:
        match = _FAKE_LOOP_PATH.fullmatch(path)
        return None if match is None else self.devices.get(int(match.group(1)))

    def free_index(self) -> int:
        # Lowest free number first, as LOOP_CTL_GET_FREE hands them out.
        index = 0
        while index in self.devices:
            index += 1
        return index

    def add_device(self, device: _Device) -> None:
        self.devices[device.index] = device
        self._fds.add(device.fd)

    def drop_device(self, device: _Device) -> None:
        del self.devices[device.index]
        self._fds.discard(device.fd)
        os.close(device.fd)

    def in_use(self, device: _Device) -> bool:
        return any(mount.holds == device.index for mount in self.mounts)

    def describe(self, device: _Device) -> LoopDevice:
        backing = device.backing_path
        if os.fstat(device.fd).st_nlink == 0:
            backing += " (deleted)"  # what /sys/block/loopN/loop/backing_file shows
        return LoopDevice(
            path=device.path,
            backing_file=backing,
            tag=device.tag,
            read_only=device.read_only,
            size_bytes=device.size_bytes,
        )

    # -- filesystems ------------------------------------------------------------------------------

    def read_fs(self, device: _Device) -> _FsHeader | None:
        raw = os.pread(device.fd, _HEADER_SIZE, 0)
        if not raw.startswith(_HEADER_MAGIC):
            return None
        fields = json.loads(raw[len(_HEADER_MAGIC) :].split(b"\0", 1)[0])
        return _FsHeader(fs_type=str(fields["type"]), size_bytes=int(fields["size"]))

    def write_fs(self, device: _Device, header: _FsHeader) -> None:
        body = json.dumps({"type": header.fs_type, "size": header.size_bytes}).encode()
        os.pwrite(device.fd, (_HEADER_MAGIC + body).ljust(_HEADER_SIZE, b"\0"), 0)

    # -- mounts -----------------------------------------------------------------------------------

    def topmost(self, mount_point: str) -> _Mount | None:
        for mount in reversed(self.mounts):
            if mount.entry.mount_point == mount_point:
                return mount
        return None

    def containing(self, path: str) -> _Mount | None:
        """The mount a path resolves into: the deepest mount point above it, topmost first."""
        best: _Mount | None = None
        for mount in self.mounts:
            point = mount.entry.mount_point
            if _is_under(path, point) and (
                best is None or len(point) >= len(best.entry.mount_point)
            ):
                best = mount
        return best

    def release(self) -> None:
        """Forget state that only lived while something was mounted (as unmount does)."""
        busy = {mount.holds for mount in self.mounts if mount.holds is not None}
        self.frozen &= busy
        self.shut_down &= busy
        for device in list(self.devices.values()):
            if device.autoclear and device.index not in busy:
                self.drop_device(device)

    def is_shut_down(self, mount_point: str) -> bool:
        """For tests: has the filesystem at mount_point been shut down?"""
        with self.lock:
            mount = self.topmost(os.path.realpath(mount_point))
            return mount is not None and mount.holds in self.shut_down

    def is_frozen(self, mount_point: str) -> bool:
        """For tests: is the filesystem at mount_point frozen?"""
        with self.lock:
            mount = self.topmost(os.path.realpath(mount_point))
            return mount is not None and mount.holds in self.frozen


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


# --- loop ----------------------------------------------------------------------------------------


class FakeLoop:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        encode_tag(tag)
        with self._kernel.lock:
            existing = self.find(tag)
            if existing is not None:
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

    def detach(self, device: str) -> None:
        _fake_index(device)
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                return
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
        return 0

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
            st = os.statvfs(path)
            return FsStats(
                total_bytes=st.f_blocks * st.f_frsize,
                available_bytes=st.f_bavail * st.f_frsize,
                used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
                total_inodes=st.f_files,
                free_inodes=st.f_ffree,
                used_inodes=st.f_files - st.f_ffree,
            )
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


# --- mounts --------------------------------------------------------------------------------------


def _per_mount_options(options: Sequence[str], read_only: bool) -> tuple[str, ...]:
    flags = ["ro" if read_only else "rw"]
    flags += [flag for flag in _MOUNT_FLAGS if flag in options]
    atime = next((flag for flag in _ATIME_FLAGS if flag in options), "relatime")
    if atime != "strictatime":  # the kernel prints nothing for strictatime
        flags.append(atime)
    return tuple(flags)


class FakeMounts:
    def __init__(self, kernel: FakeKernel) -> None:
        self._kernel = kernel

    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None:
        argv = ["mount", "-t", fs_type]
        if options:
            argv += ["-o", ",".join(options)]
        argv += [device, target]
        path = os.path.realpath(target)
        with self._kernel.lock:
            found = self._kernel.device(device)
            if found is None:
                message = f"mount: {target}: special device {device} does not exist."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            if not os.path.isdir(path):
                message = f"mount: {target}: mount point does not exist."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            header = self._kernel.read_fs(found)
            if header is None or header.fs_type != fs_type:
                message = f"mount: {target}: wrong fs type, bad option, bad superblock on {device}."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            # mount(8) falls back to read-only by itself when the device is write-protected.
            read_only = "ro" in options or found.read_only
            entry = MountEntry(
                mount_point=path,
                source=device,
                fs_type=fs_type,
                device_number=f"{_LOOP_MAJOR}:{found.index}",
                root="/",
                options=_per_mount_options(options, read_only),
            )
            self._kernel.mounts.append(_Mount(entry=entry, holds=found.index))

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        argv = ["mount", "--bind", source, target]
        with self._kernel.lock:
            device = self._kernel.device(source)
            source_path = source if device is not None else os.path.realpath(source)
            if device is None and not os.path.exists(source_path):
                message = f"mount: {target}: special device {source} does not exist."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            path = os.path.realpath(target)
            if not os.path.exists(path):
                message = f"mount: {target}: mount point does not exist."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            if (device is None and os.path.isdir(source_path)) != os.path.isdir(path):
                # The kernel binds directories onto directories and files onto files only.
                message = f"mount: {target}: mount(2) system call failed: Not a directory."
                raise CommandError(argv, _MOUNT_EXIT, "", message)
            self._kernel.mounts.append(self._bind_record(device, source_path, path, read_only))

    def _bind_record(
        self, device: _Device | None, source: str, target: str, read_only: bool
    ) -> _Mount:
        if device is not None:
            # A device node lives on devtmpfs; binding it does not open the device.
            entry = MountEntry(
                mount_point=target,
                source="devtmpfs",
                fs_type="devtmpfs",
                device_number=_DEVTMPFS_NUMBER,
                root="/" + posixpath.basename(device.path),
                options=_per_mount_options((), read_only),
            )
            return _Mount(entry=entry, holds=None)
        under = self._kernel.containing(source)
        if under is None:
            st = os.stat(source)
            entry = MountEntry(
                mount_point=target,
                source="none",
                fs_type="none",
                device_number=f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
                root=source,
                options=_per_mount_options((), read_only),
            )
            return _Mount(entry=entry, holds=None)
        relative = posixpath.relpath(source, under.entry.mount_point)
        root = posixpath.normpath(posixpath.join(under.entry.root, relative))
        inherited = under.entry.options
        entry = MountEntry(
            mount_point=target,
            source=under.entry.source,
            fs_type=under.entry.fs_type,
            device_number=under.entry.device_number,
            root=root,
            # A bind inherits the source mount's flags, read-only included.
            options=_per_mount_options(inherited, read_only or "ro" in inherited),
        )
        return _Mount(entry=entry, holds=under.holds)

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        path = os.path.realpath(target)
        with self._kernel.lock:
            mounts = self._kernel.mounts
            position = next(
                (i for i in range(len(mounts) - 1, -1, -1) if mounts[i].entry.mount_point == path),
                None,
            )
            if position is None:
                return
            children = [
                mount
                for mount in mounts[position + 1 :]
                if mount.entry.mount_point != path and _is_under(mount.entry.mount_point, path)
            ]
            if children and not lazy:
                argv = ["umount", path]
                raise CommandError(argv, _MOUNT_EXIT, "", f"umount: {path}: target is busy.")
            # A lazy unmount detaches the whole subtree at once.
            gone = {id(mounts[position])} | {id(mount) for mount in children}
            self._kernel.mounts = [mount for mount in mounts if id(mount) not in gone]
            self._kernel.release()

    def find(self, target: str) -> MountEntry | None:
        with self._kernel.lock:
            mount = self._kernel.topmost(os.path.realpath(target))
            return None if mount is None else mount.entry

    def list(self) -> list[MountEntry]:
        with self._kernel.lock:
            return [mount.entry for mount in self._kernel.mounts]


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
    )
