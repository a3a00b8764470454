"""The kernel's loop-device interface, driven with ioctls: the structs and numbers of linux/loop.h,
and one call each (configure, read a device's status, take a detaching device back, describe a
device from sysfs). No state: LinuxLoop (loop.py) keeps the tag index and the locks."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
from typing import NamedTuple

from csi_hostpath.system.base import LoopDevice
from csi_hostpath.system.linux import devnodes
from csi_hostpath.system.linux._log import log

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

SYS_BLOCK = devnodes.SYS_BLOCK
SYS_MODULE_LOOP = "/sys/module/loop"
MINORBITS = 20  # include/linux/kdev_t.h: the bits of a device number's minor part
_LOOP_NAME = re.compile(r"loop(\d+)")
_LOOP_PATH = re.compile(r"/dev/loop(\d+)")

# Another process can configure the device LOOP_CTL_GET_FREE just handed us; each retry asks for a
# new free device. Bounded so that a kernel that keeps answering EBUSY turns into an error.
ATTACH_ATTEMPTS = 16
POLL_SECONDS = 0.005
# A device detached while something still holds it open (a mount, a copy of one in a mount
# namespace another process made, or just another thread's LOOP_GET_STATUS64) stays bound, tag
# and all, with autoclear set until that last close. Attach takes such a device back (clears
# autoclear while it holds it open); one already in rundown refuses the open, and attach waits
# up to this long for it to go before attaching anew.
RUNDOWN_WAIT_SECONDS = 0.5


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


def open_loop(device: str, mode: int) -> int | None:
    """Open a loop device, its node made first where /dev has none (devnodes.py); None when it
    is gone or on its way out. A device another thread is detaching is in rundown, and the
    kernel refuses opens with ENXIO until it is free again."""
    if not devnodes.loop_node(loop_index(device)):
        return None
    try:
        return os.open(device, mode | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENXIO):
            return None
        raise


class Status(NamedTuple):
    tag: str  # lo_file_name
    flags: int  # lo_flags
    backing_dev: int  # st_dev of the backing file (lo_device), as userspace encodes it
    backing_inode: int  # lo_inode


def user_dev(kernel_dev: int) -> int:
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


def status_of(fd: int) -> Status | None:
    """The tag, flags and backing file identity of the open loop device fd; None when it is not
    (or no longer) configured."""
    fields = _get_status(fd)
    if fields is None:
        return None
    tag, flags = _tag_and_flags(fields)
    dev, inode = fields[0], fields[1]
    assert isinstance(dev, int) and isinstance(inode, int)
    return Status(tag, flags, user_dev(dev), inode)


def read_status(device: str) -> Status | None:
    """status_of a device by path; None when it is gone or not configured."""
    fd = open_loop(device, os.O_RDONLY)
    if fd is None:
        return None
    try:
        return status_of(fd)
    finally:
        os.close(fd)


def carries(status: Status, device: LoopDevice) -> bool:
    """Is the configured device of status the one described by device: same tag, same backing
    file? The number alone says nothing: a released device's number serves the next attach of
    any process on the kernel."""
    return (status.tag, status.backing_dev, status.backing_inode) == (
        device.tag,
        device.backing_dev,
        device.backing_inode,
    )


def take_back(device: str, tag: str) -> bool:
    """Cancel the pending detach of device, if it still carries tag: clear autoclear (settable
    with LOOP_SET_STATUS64, drivers/block/loop.c loop_set_status) while holding the device
    open, so the holder's last close can't release it in between. False when it is in rundown
    already (the open is refused) or was released and reused meanwhile."""
    fd = open_loop(device, os.O_RDONLY)
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


def read_tag(device: str) -> str | None:
    """lo_file_name of a configured device; None when it is not (or no longer) configured."""
    status = read_status(device)
    return None if status is None else status[0]


def loop_devices() -> list[tuple[int, bool]]:
    """(N, bound) for every loop device the kernel has, bound to a backing file or not."""
    found: list[tuple[int, bool]] = []
    for entry in os.scandir(SYS_BLOCK):
        match = _LOOP_NAME.fullmatch(entry.name)
        if match:
            # loop/ exists in sysfs only while a backing file is attached.
            bound = os.path.exists(f"{SYS_BLOCK}/{entry.name}/loop/backing_file")
            found.append((int(match.group(1)), bound))
    return sorted(found)


def configured_loop_indices() -> list[int]:
    return [index for index, bound in loop_devices() if bound]


def device_ceiling() -> int:
    """How many loop devices this kernel can have. LOOP_CTL_GET_FREE makes a new device whenever
    none is free, numbered without bound but for the minor number it needs (N << part_shift, of
    MINORBITS); part_shift is fls(max_part). max_loop is not a bound here: it is how many devices
    the kernel made at boot, and limits only the legacy autoload by opening a missing /dev/loopN."""
    raw = read_sys(f"{SYS_MODULE_LOOP}/parameters/max_part")
    max_part = int(raw) if raw is not None and raw.strip().isdigit() else 0
    return (1 << MINORBITS) >> max_part.bit_length()


def describe(index: int, tag: str) -> LoopDevice | None:
    base = f"{SYS_BLOCK}/loop{index}"
    backing = read_sys(f"{base}/loop/backing_file")
    read_only = read_sys(f"{base}/ro")
    sectors = read_sys(f"{base}/size")
    status = read_status(f"/dev/loop{index}")
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


def open_device(device: str, mode: int) -> int:
    """open_loop of a device that must be there: FileNotFoundError when it is not."""
    fd = open_loop(device, mode)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "no such loop device", device)
    return fd


def configure(device: str, backing_fd: int, flags: int, name: bytes) -> bool:
    """LOOP_CONFIGURE device; False if another process took it first (EBUSY), or it is still
    being released by a detach (ENXIO): the caller asks for another free device."""
    fd = open_loop(device, os.O_RDWR)
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
