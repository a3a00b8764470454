"""The fake system layer's kernel: loop devices, filesystem headers and mounts, shared by the
fake parts (__init__.py, fake_mounts.py) of one machine. What the fake pretends: see
__init__.py."""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from csi_hostpath.system.base import (
    Holder,
    LoopDevice,
    MountEntry,
)

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
    # Device index -> the errors and failed writes its filesystem counted (ext4's errors_count
    # plus warning_count); a test sets it to play a thin pool that ran out under a volume.
    fs_errors: dict[int, int] = field(default_factory=dict)
    # The plugin's CAP_SYS_RESOURCE: without it the kernel refuses an online ext4 resize (EPERM).
    cap_sys_resource: bool = True
    # Processes a test pretends: the path each uses (a directory it sits in, a file or a device
    # node it has open) and who it is. They keep mounts busy and devices open, as real ones do.
    processes: list[tuple[str, Holder]] = field(default_factory=list)
    # Loop.watch callbacks: told of every device added or dropped, from a thread of their own,
    # as the real watch is (a uevent arrives on the netlink socket's thread).
    watchers: list[Callable[[str], None]] = field(default_factory=list)
    # How many loop devices the kernel can have (LinuxLoop reads it from the minor space).
    loop_ceiling: int = 1 << 20
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
        self._uevent(device.path)

    def drop_device(self, device: _Device) -> None:
        del self.devices[device.index]
        self._fds.discard(device.fd)
        os.close(device.fd)
        self._uevent(device.path)

    def _uevent(self, path: str) -> None:
        for changed in list(self.watchers):
            threading.Thread(target=changed, args=(path,), daemon=True).start()

    def in_use(self, device: _Device) -> bool:
        return any(mount.holds == device.index for mount in self.mounts) or any(
            path == device.path for path, _ in self.processes
        )

    def describe(self, device: _Device) -> LoopDevice:
        backing = device.backing_path
        st = os.fstat(device.fd)
        if st.st_nlink == 0:
            backing += " (deleted)"  # what /sys/block/loopN/loop/backing_file shows
        return LoopDevice(
            path=device.path,
            backing_file=backing,
            tag=device.tag,
            read_only=device.read_only,
            size_bytes=device.size_bytes,
            backing_dev=st.st_dev,
            backing_inode=st.st_ino,
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
            if device.autoclear and not self.in_use(device):
                self.drop_device(device)

    # -- processes --------------------------------------------------------------------------------

    def hold(self, path: str, holder: Holder) -> None:
        """For tests: a process starts using path (its cwd, or a file or device it opened)."""
        with self.lock:
            used = path if self.device(path) is not None else os.path.realpath(path)
            self.processes.append((used, holder))

    def let_go(self, pid: int) -> None:
        """For tests: the process exits; a device it alone kept open goes (autoclear)."""
        with self.lock:
            self.processes = [(path, h) for path, h in self.processes if h.pid != pid]
            self.release()

    def mount_users(self, mount: _Mount) -> list[Holder]:
        """Processes inside this very mount: they make a plain unmount of it EBUSY."""
        return [h for path, h in self.processes if self.containing(path) is mount]

    def device_users(self, index: int) -> list[Holder]:
        """Processes with the device open or inside a filesystem mounted from it."""
        found = []
        for path, holder in self.processes:
            inside = self.containing(path)
            if path == f"{FAKE_LOOP_PREFIX}{index}" or (inside and inside.holds == index):
                found.append(holder)
        return found

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
