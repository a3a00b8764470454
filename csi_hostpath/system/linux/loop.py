"""Loop devices on a real Linux kernel, driven with ioctls rather than losetup: losetup cannot
set the tag (lo_file_name) that lets several node plugins on one kernel tell their devices apart.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from csi_hostpath.system.base import Holder, LoopDevice
from csi_hostpath.system.holders import holders_of_device
from csi_hostpath.system.linux._log import log
from csi_hostpath.system.linux.uevents import watch_loop_devices

# --- ioctl numbers (linux/loop.h, linux/fs.h) ----------------------------------------------------
LOOP_CLR_FD = 0x4C01
LOOP_SET_STATUS64 = 0x4C04
LOOP_GET_STATUS64 = 0x4C05
LOOP_SET_CAPACITY = 0x4C07
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4
LO_FLAGS_DIRECT_IO = 16
BLKROSET = 0x125D
BLKGETSIZE64 = 0x80081272

# struct loop_info64 and struct loop_config, packed without padding exactly as the kernel lays
# them out ("=": standard sizes, no alignment; the fields are already naturally aligned).
LOOP_INFO64 = struct.Struct("=5Q4I64s64s32s2Q")
_LOOP_CONFIG_HEAD = struct.Struct("=2I")
_LOOP_CONFIG_RESERVED = bytes(8 * 8)
_LOOP_INFO64_SIZE = 232  # sizeof(struct loop_info64)
_LOOP_CONFIG_SIZE = 304  # sizeof(struct loop_config)
assert LOOP_INFO64.size == _LOOP_INFO64_SIZE, LOOP_INFO64.size
assert _LOOP_CONFIG_HEAD.size + LOOP_INFO64.size + len(_LOOP_CONFIG_RESERVED) == _LOOP_CONFIG_SIZE
_LO_NAME_SIZE = 64
_LO_FILE_NAME_INDEX = 9  # position of lo_file_name in the unpacked loop_info64
_LO_FLAGS_INDEX = 8  # and of lo_flags

LOOP_CONTROL = "/dev/loop-control"
SYS_BLOCK = "/sys/block"
_LOOP_NAME = re.compile(r"loop(\d+)")
_LOOP_PATH = re.compile(r"/dev/loop(\d+)")

# Another process can configure the device LOOP_CTL_GET_FREE just handed us; each retry asks for a
# new free device. Bounded so that a kernel that keeps answering EBUSY turns into an error.
_ATTACH_ATTEMPTS = 16
# devtmpfs creates /dev/loopN when the kernel adds the disk, which can trail LOOP_CTL_GET_FREE.
_NODE_WAIT_SECONDS = 2.0
_NODE_POLL_SECONDS = 0.005
# A device detached while something still holds it open (a mount, a copy of one in a mount
# namespace another process made, or just another thread's LOOP_GET_STATUS64) stays bound, tag
# and all, with autoclear set until that last close. Attach takes such a device back (clears
# autoclear while it holds it open); one already in rundown refuses the open, and attach waits
# up to this long for it to go before attaching anew.
_RUNDOWN_WAIT_SECONDS = 0.5

# "find by tag, else attach" for one tag runs under that tag's stripe, so two threads attaching
# one tag can't both miss the find and attach the file twice, while attaches of other tags go on.
_TAG_LOCKS = tuple(threading.Lock() for _ in range(64))
# Held only across LOOP_CTL_GET_FREE .. LOOP_CONFIGURE, so this process's threads don't all draw
# the same free device and collide in EBUSY; other processes still can, and the retry handles it.
_FREE_LOCK = threading.Lock()


class _TagIndex:
    """tag → index of the loop device carrying it, for every device of this process's kernel
    that carries a tag, built by one scan of /sys/block on first use and kept by attach and
    detach since. A hit is checked with one LOOP_GET_STATUS64 on that device before it is used
    (someone else may have detached it, or reused the number), so a stale entry costs one ioctl
    and is dropped. Nothing is ever removed by a scan, only added: a scan racing an attach could
    otherwise forget the new device, and a miss is believed without a scan (no full scan on the
    request path). One index per process: every LinuxLoop shares it, as they share the kernel.

    What it does not see: a device another process tags after the first scan. The tags carry
    the node ID, and one node ID has one node plugin at a time; its restart scans again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tags: dict[str, int] | None = None

    def _scanned(self) -> dict[str, int]:
        if self._tags is None:
            found: dict[str, int] = {}
            for index in _configured_loop_indices():
                tag = _read_tag(f"/dev/loop{index}")
                if tag:
                    found.setdefault(tag, index)
            self._tags = found
        return self._tags

    def get(self, tag: str) -> int | None:
        with self._lock:
            return self._scanned().get(tag)

    def put(self, tag: str, index: int) -> None:
        with self._lock:
            self._scanned()[tag] = index

    def merge(self, seen: dict[str, int]) -> None:
        """What a full scan saw, added where the index has nothing for the tag (and the index
        itself when this was the first scan: no second one for it)."""
        with self._lock:
            if self._tags is None:
                self._tags = dict(seen)
                return
            tags = self._tags
            for tag, index in seen.items():
                tags.setdefault(tag, index)

    def drop(self, tag: str, index: int) -> None:
        with self._lock:
            if self._scanned().get(tag) == index:
                del self._scanned()[tag]


_INDEX = _TagIndex()


def _tag_lock(tag: str) -> threading.Lock:
    return _TAG_LOCKS[hash(tag) % len(_TAG_LOCKS)]


# --- small helpers -------------------------------------------------------------------------------


def encode_tag(tag: str) -> bytes:
    """The tag as it goes into lo_file_name: 1..63 bytes of UTF-8 without NUL."""
    raw = tag.encode("utf-8")
    if not raw or len(raw) > _LO_NAME_SIZE - 1 or b"\0" in raw:
        raise ValueError(f"loop tag must be 1..{_LO_NAME_SIZE - 1} bytes without NUL: {tag!r}")
    return raw


def loop_index(device: str) -> int:
    """N of /dev/loopN; ValueError for anything else."""
    match = _LOOP_PATH.fullmatch(device)
    if match is None:
        raise ValueError(f"not a loop device path: {device!r}")
    return int(match.group(1))


def read_sys(path: str) -> str | None:
    """A sysfs attribute, or None when it is gone. A loop device being detached answers ENODEV
    or ENXIO for a moment before its loop/ directory disappears."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read().rstrip("\n")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
            return None
        raise


# --- loop ----------------------------------------------------------------------------------------


def _loop_config(backing_fd: int, flags: int, name: bytes) -> bytes:
    info = LOOP_INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, flags, name, b"", b"", 0, 0)
    return _LOOP_CONFIG_HEAD.pack(backing_fd, 0) + info + _LOOP_CONFIG_RESERVED


def _open_loop(device: str, mode: int) -> int | None:
    """Open a loop device; None when it is gone or on its way out. A device another thread is
    detaching is in rundown, and the kernel refuses opens with ENXIO until it is free again."""
    try:
        return os.open(device, mode | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENXIO):
            return None
        raise


class _Status(NamedTuple):
    tag: str  # lo_file_name
    flags: int  # lo_flags
    backing_dev: int  # st_dev of the backing file (lo_device), as userspace encodes it
    backing_inode: int  # lo_inode


def _user_dev(kernel_dev: int) -> int:
    """lo_device is huge_encode_dev(): minor's low byte, major, then minor's high bits."""
    major = (kernel_dev >> 8) & 0xFFF
    minor = (kernel_dev & 0xFF) | ((kernel_dev >> 12) & 0xFFF00)
    return os.makedev(major, minor)


def _get_status(fd: int) -> list[object] | None:
    """The unpacked struct loop_info64 of an open loop device; None when it is not (or no
    longer) configured."""
    buf = bytearray(LOOP_INFO64.size)
    try:
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buf, True)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        raise
    return list(LOOP_INFO64.unpack(bytes(buf)))


def _tag_and_flags(fields: list[object]) -> tuple[str, int]:
    name, flags = fields[_LO_FILE_NAME_INDEX], fields[_LO_FLAGS_INDEX]
    assert isinstance(name, bytes) and isinstance(flags, int)
    return name.split(b"\0", 1)[0].decode("utf-8", errors="replace"), flags


def _status_of(fd: int) -> _Status | None:
    """The tag, flags and backing file identity of the open loop device fd; None when it is not
    (or no longer) configured."""
    fields = _get_status(fd)
    if fields is None:
        return None
    tag, flags = _tag_and_flags(fields)
    dev, inode = fields[0], fields[1]
    assert isinstance(dev, int) and isinstance(inode, int)
    return _Status(tag, flags, _user_dev(dev), inode)


def _read_status(device: str) -> _Status | None:
    """_status_of a device by path; None when it is gone or not configured."""
    fd = _open_loop(device, os.O_RDONLY)
    if fd is None:
        return None
    try:
        return _status_of(fd)
    finally:
        os.close(fd)


def _carries(status: _Status, device: LoopDevice) -> bool:
    """Is the configured device of status the one described by device: same tag, same backing
    file? The number alone says nothing: a released device's number serves the next attach of
    any process on the kernel."""
    return (status.tag, status.backing_dev, status.backing_inode) == (
        device.tag,
        device.backing_dev,
        device.backing_inode,
    )


def _take_back(device: str, tag: str) -> bool:
    """Cancel the pending detach of device, if it still carries tag: clear autoclear (settable
    with LOOP_SET_STATUS64, drivers/block/loop.c loop_set_status) while holding the device
    open, so the holder's last close can't release it in between. False when it is in rundown
    already (the open is refused) or was released and reused meanwhile."""
    fd = _open_loop(device, os.O_RDONLY)
    if fd is None:
        return False
    try:
        fields = _get_status(fd)
        if fields is None or _tag_and_flags(fields)[0] != tag:
            return False
        flags = _tag_and_flags(fields)[1]
        if flags & LO_FLAGS_AUTOCLEAR:
            fields[_LO_FLAGS_INDEX] = flags & ~LO_FLAGS_AUTOCLEAR
            fcntl.ioctl(fd, LOOP_SET_STATUS64, LOOP_INFO64.pack(*fields))
            log.info("took back %s (%s): its detach was waiting on another holder", device, tag)
        return True
    finally:
        os.close(fd)


def _read_tag(device: str) -> str | None:
    """lo_file_name of a configured device; None when it is not (or no longer) configured."""
    status = _read_status(device)
    return None if status is None else status[0]


def _configured_loop_indices() -> list[int]:
    indices: list[int] = []
    for entry in os.scandir(SYS_BLOCK):
        match = _LOOP_NAME.fullmatch(entry.name)
        # loop/ exists in sysfs only while a backing file is attached.
        if match and os.path.exists(f"{SYS_BLOCK}/{entry.name}/loop/backing_file"):
            indices.append(int(match.group(1)))
    return sorted(indices)


def _describe(index: int, tag: str) -> LoopDevice | None:
    base = f"{SYS_BLOCK}/loop{index}"
    backing = read_sys(f"{base}/loop/backing_file")
    read_only = read_sys(f"{base}/ro")
    sectors = read_sys(f"{base}/size")
    status = _read_status(f"/dev/loop{index}")
    if backing is None or read_only is None or sectors is None or status is None:
        return None
    if status.tag != tag:
        return None  # detached and reused by someone else between the reads
    return LoopDevice(
        path=f"/dev/loop{index}",
        backing_file=backing,
        tag=tag,
        read_only=read_only.strip() == "1",
        size_bytes=int(sectors) * 512,
        backing_dev=status.backing_dev,
        backing_inode=status.backing_inode,
    )


def _wait_for_node(path: str) -> None:
    deadline = time.monotonic() + _NODE_WAIT_SECONDS
    while True:
        try:
            if stat.S_ISBLK(os.stat(path).st_mode):
                return
        except FileNotFoundError:
            pass
        if time.monotonic() >= deadline:
            raise FileNotFoundError(
                errno.ENOENT, f"device node did not appear within {_NODE_WAIT_SECONDS}s", path
            )
        time.sleep(_NODE_POLL_SECONDS)


def _configure(device: str, backing_fd: int, flags: int, name: bytes) -> bool:
    """LOOP_CONFIGURE device; False if another process took it first (EBUSY), or it is still
    being released by a detach (ENXIO): the caller asks for another free device."""
    fd = _open_loop(device, os.O_RDWR)
    if fd is None:
        return False
    try:
        for extra in (LO_FLAGS_DIRECT_IO, 0):
            try:
                fcntl.ioctl(fd, LOOP_CONFIGURE, _loop_config(backing_fd, flags | extra, name))
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                if exc.errno == errno.EINVAL and extra:
                    # The backing filesystem can't do O_DIRECT at the loop's block size (tmpfs,
                    # for one); buffered IO still works, it just caches twice.
                    log.debug("direct IO refused for %s, attaching buffered", device)
                    continue
                raise
            return True
        raise AssertionError("unreachable: the buffered attempt returns or raises")
    finally:
        os.close(fd)


class LinuxLoop:
    """Loop devices by tag. find() costs one LOOP_GET_STATUS64 and three sysfs reads whatever
    the number of devices on the host (the tag index above); list() scans them all."""

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        name = encode_tag(tag)
        flags = LO_FLAGS_READ_ONLY if read_only else 0
        with _tag_lock(tag):
            existing = self._existing(tag)
            if existing is not None:
                return existing
            mode = os.O_RDONLY if read_only else os.O_RDWR
            backing_fd = os.open(backing_file, mode | os.O_CLOEXEC)
            try:
                control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
                try:
                    for _ in range(_ATTACH_ATTEMPTS):
                        with _FREE_LOCK:
                            index = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
                            device = f"/dev/loop{index}"
                            _wait_for_node(device)
                            configured = _configure(device, backing_fd, flags, name)
                        if not configured:
                            log.debug("%s was taken by someone else; asking for another", device)
                            continue
                        _INDEX.put(tag, index)
                        described = _describe(index, tag)
                        if described is None:
                            raise OSError(errno.ENXIO, "detached right after attach", device)
                        log.info("attached %s to %s as %r", backing_file, device, tag)
                        return described
                finally:
                    os.close(control)
            finally:
                os.close(backing_fd)
        raise OSError(errno.EBUSY, f"no free loop device after {_ATTACH_ATTEMPTS} attempts")

    def _existing(self, tag: str) -> LoopDevice | None:
        """The device carrying tag for attach to reuse. One whose detach waits on another
        holder is taken back: handing it out as it is let the holder's last close take it
        away from its new user (a mount then read a device of size 0: "can't read
        superblock"); attaching the file to a second device instead would let two filesystems
        write one file. One already in rundown is waited for."""
        deadline = time.monotonic() + _RUNDOWN_WAIT_SECONDS
        while True:
            found = self._lookup(tag)
            if found is None:
                return None
            device, flags = found
            if not flags & LO_FLAGS_AUTOCLEAR or _take_back(device.path, tag):
                return device
            if time.monotonic() >= deadline:
                raise OSError(errno.EBUSY, f"{device.path} ({tag}) is still being released")
            time.sleep(_NODE_POLL_SECONDS)

    def _lookup(self, tag: str) -> tuple[LoopDevice, int] | None:
        index = _INDEX.get(tag)
        if index is None:
            return None
        status = _read_status(f"/dev/loop{index}")
        if status is not None and status[0] == tag:
            found = _describe(index, tag)
            if found is not None:
                return found, status[1]
        _INDEX.drop(tag, index)
        return None

    def find(self, tag: str) -> LoopDevice | None:
        found = self._lookup(tag)
        return None if found is None else found[0]

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        """Every device whose tag starts with tag_prefix: one scan of all loop devices, which
        also refreshes the tag index (reconcile at start calls this)."""
        devices: list[LoopDevice] = []
        seen: dict[str, int] = {}
        for index in _configured_loop_indices():
            tag = _read_tag(f"/dev/loop{index}")
            if not tag:
                continue
            seen.setdefault(tag, index)
            if not tag.startswith(tag_prefix):
                continue
            device = _describe(index, tag)
            if device is not None:
                devices.append(device)
        _INDEX.merge(seen)
        return devices

    def detach(self, device: LoopDevice) -> None:
        """Release device if it is still the one described: its number may serve another
        process's attach by now (a detach that comes late, after the device was released by its
        last holder), and clearing that one took a volume away from under its mkfs or mount.
        The check and the LOOP_CLR_FD go through one open fd, and the kernel releases a loop
        device only at its last close, so the device checked is the device cleared."""
        # The index keeps its entry: a device still mounted only gets autoclear and carries its
        # tag until the last user closes it, and find() must still see it until then.
        index = loop_index(device.path)
        fd = _open_loop(device.path, os.O_RDONLY)
        if fd is None:
            return  # gone, or already being released
        try:
            status = _status_of(fd)
            if status is None:
                return  # not configured, nothing to release
            if not _carries(status, device):
                log.info(
                    "not detaching %s: it carries %r now, not %r (ours is gone already)",
                    device.path,
                    status.tag,
                    device.tag,
                )
                return
            # A read-only flag set with BLKROSET outlives the attachment and would make the next
            # volume on this device unformattable, so it goes before the device is released.
            if read_sys(f"{SYS_BLOCK}/loop{index}/ro") == "1":
                fcntl.ioctl(fd, BLKROSET, struct.pack("i", 0))
            try:
                fcntl.ioctl(fd, LOOP_CLR_FD, 0)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: not configured, nothing to release
                    raise
                return
        finally:
            os.close(fd)
        # Still open elsewhere (mounted, say)? The kernel then only sets autoclear, and the
        # device goes when its last user closes it.
        log.info("detached %s (%s)", device.path, device.tag)

    def refresh_capacity(self, device: str) -> None:
        loop_index(device)
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, LOOP_SET_CAPACITY, 0)
        finally:
            os.close(fd)

    def set_read_only(self, device: str, read_only: bool) -> None:
        loop_index(device)
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, BLKROSET, struct.pack("i", int(read_only)))
        finally:
            os.close(fd)

    def holders(self, device: str) -> tuple[Holder, ...]:
        return tuple(holders_of_device(device))

    def watch(self, changed: Callable[[str], None]) -> Callable[[], None]:
        return watch_loop_devices(changed)


# --- devices -------------------------------------------------------------------------------------


class LinuxDevices:
    def size(self, device: str) -> int:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = fcntl.ioctl(fd, BLKGETSIZE64, bytes(8))
        finally:
            os.close(fd)
        (size,) = struct.unpack("=Q", raw)
        assert isinstance(size, int)
        return size

    def is_node(self, path: str, device: str) -> bool:
        try:
            there, ours = os.stat(path), os.stat(device)
        except OSError:
            return False
        return (
            stat.S_ISBLK(there.st_mode)
            and stat.S_ISBLK(ours.st_mode)
            and there.st_rdev == ours.st_rdev
        )
