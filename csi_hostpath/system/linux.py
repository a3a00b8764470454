"""The system layer on a real Linux kernel: sparse files, loop ioctls, mkfs/mount tools, mountinfo.

Loop devices are driven with ioctls rather than losetup, because losetup cannot set the tag
(lo_file_name) that lets several node plugins on one kernel tell their devices apart.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import re
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.system.base import CommandError, FsStats, LoopDevice, MountEntry, NoSpace, System
from csi_hostpath.system.runner import run

log = logging.getLogger(__name__)

# --- ioctl numbers (linux/loop.h, linux/fs.h) ----------------------------------------------------
LOOP_CLR_FD = 0x4C01
LOOP_GET_STATUS64 = 0x4C05
LOOP_SET_CAPACITY = 0x4C07
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_DIRECT_IO = 16
BLKROSET = 0x125D
BLKGETSIZE64 = 0x80081272
FICLONE = 0x40049409
FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32); also EXT4_IOC_SHUTDOWN / XFS_IOC_GOINGDOWN
FS_SHUTDOWN_NOSYNC = 2  # EXT4_GOING_FLAGS_NOLOGFLUSH == XFS_FSOP_GOING_FLAGS_NOLOGFLUSH
FIFREEZE = 0xC0045877
FITHAW = 0xC0045878

# struct loop_info64 and struct loop_config, packed without padding exactly as the kernel lays
# them out ("=": standard sizes, no alignment; the fields are already naturally aligned).
_LOOP_INFO64 = struct.Struct("=5Q4I64s64s32s2Q")
_LOOP_CONFIG_HEAD = struct.Struct("=2I")
_LOOP_CONFIG_RESERVED = bytes(8 * 8)
_LOOP_INFO64_SIZE = 232  # sizeof(struct loop_info64)
_LOOP_CONFIG_SIZE = 304  # sizeof(struct loop_config)
assert _LOOP_INFO64.size == _LOOP_INFO64_SIZE, _LOOP_INFO64.size
assert _LOOP_CONFIG_HEAD.size + _LOOP_INFO64.size + len(_LOOP_CONFIG_RESERVED) == _LOOP_CONFIG_SIZE
_LO_NAME_SIZE = 64
_LO_FILE_NAME_INDEX = 9  # position of lo_file_name in the unpacked loop_info64

LOOP_CONTROL = "/dev/loop-control"
_SYS_BLOCK = "/sys/block"
_LOOP_NAME = re.compile(r"loop(\d+)")
_LOOP_PATH = re.compile(r"/dev/loop(\d+)")

# Another process can configure the device LOOP_CTL_GET_FREE just handed us; each retry asks for a
# new free device. Bounded so that a kernel that keeps answering EBUSY turns into an error.
_ATTACH_ATTEMPTS = 16
# devtmpfs creates /dev/loopN when the kernel adds the disk, which can trail LOOP_CTL_GET_FREE.
_NODE_WAIT_SECONDS = 2.0
_NODE_POLL_SECONDS = 0.005

# Serialises "find by tag, else attach" within this process, so two threads attaching one tag
# can't both miss the find and attach the file twice.
_ATTACH_LOCK = threading.Lock()

_MKFS: dict[str, list[str]] = {
    # Lazy init keeps mkfs fast and the backing file sparse; the kernel zeroes the inode tables
    # in the background after the first mount.
    "ext4": ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
}
# mkfs and grow walk metadata proportional to the volume size; big volumes need more than the
# runner's default minute.
_FS_TOOL_TIMEOUT = 600.0
_BLKID_NOTHING_FOUND = 2  # blkid's exit code when no signature is found


# --- small helpers -------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_no_space(exc: OSError) -> bool:
    # EFBIG too: a size beyond the pool filesystem's largest file is space the pool can't hold.
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


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


def _read_sys(path: str) -> str | None:
    """A sysfs attribute, or None when it is gone. A loop device being detached answers ENODEV
    or ENXIO for a moment before its loop/ directory disappears."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read().rstrip("\n")
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
            return None
        raise


# --- pool ----------------------------------------------------------------------------------------


_EXT4_SB_OFFSET = 1024
_EXT4_SB_SIZE = 1024


class LinuxPool:
    """Sparse backing files. Every change is fsynced with its directory, so it survives a crash."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self._root = Path(root)
        # Only the fake turns this off, to keep unit tests fast; the driver always syncs.
        self._durable = durable

    @property
    def root(self) -> Path:
        return self._root

    def _sync(self, fd: int) -> None:
        if self._durable:
            os.fsync(fd)

    def _sync_dir(self, directory: Path) -> None:
        if self._durable:
            _fsync_dir(directory)

    def create(self, path: Path, size_bytes: int) -> None:
        if size_bytes < 0:
            raise ValueError(f"negative size {size_bytes}")
        existing = self.size(path)
        if existing is not None:
            if existing == size_bytes:
                return
            raise FileExistsError(
                errno.EEXIST, f"exists with size {existing}, not {size_bytes}", str(path)
            )
        # Built under a temporary name and renamed, so a crash never leaves a file of the wrong
        # size under the real name (which the next create would refuse).
        tmp = _tmp_path(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, size_bytes)
                self._sync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if _is_no_space(exc):
                raise NoSpace(f"cannot create {path} of {size_bytes} bytes: {exc}") from exc
            raise
        self._sync_dir(path.parent)

    def remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        self._sync_dir(path.parent)

    def size(self, path: Path) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def allocated(self, path: Path) -> int:
        try:
            return os.stat(path).st_blocks * 512
        except FileNotFoundError:
            return 0

    def grow(self, path: Path, size_bytes: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size >= size_bytes:
                return
            try:
                os.ftruncate(fd, size_bytes)
            except OSError as exc:
                if _is_no_space(exc):
                    raise NoSpace(f"cannot grow {path} to {size_bytes} bytes: {exc}") from exc
                raise
            self._sync(fd)
        finally:
            os.close(fd)

    def copy_sparse(self, source: Path, dest: Path) -> None:
        tmp = _tmp_path(dest)
        src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                _copy_fd_sparse(src, dst)
                self._sync(dst)
            finally:
                os.close(dst)
            os.rename(tmp, dest)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if _is_no_space(exc):
                raise NoSpace(f"cannot copy {source} to {dest}: {exc}") from exc
            raise
        finally:
            os.close(src)
        self._sync_dir(dest.parent)

    def free_bytes(self) -> int:
        st = os.statvfs(self._root)
        return st.f_bavail * st.f_frsize


def _copy_fd_sparse(src: int, dst: int) -> None:
    try:
        fcntl.ioctl(dst, FICLONE, src)
        return
    except OSError as exc:
        # Not a reflink-capable filesystem (ext4), or source and pool on different filesystems.
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL):
            raise
    size = os.fstat(src).st_size
    # Sized first, so every range we never write stays a hole.
    os.ftruncate(dst, size)
    offset = 0
    while offset < size:
        try:
            start = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after offset: the rest is one hole
                break
            raise
        end = os.lseek(src, start, os.SEEK_HOLE)
        _copy_range(src, dst, start, end)
        offset = end


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    position = start
    while position < end:
        try:
            copied = os.copy_file_range(src, dst, end - position, position, position)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            _copy_range_by_hand(src, dst, position, end)
            return
        if copied == 0:  # source shrank under us; nothing more to read
            return
        position += copied


def _copy_range_by_hand(src: int, dst: int, start: int, end: int) -> None:
    chunk = 1 << 20
    position = start
    while position < end:
        data = os.pread(src, min(chunk, end - position), position)
        if not data:
            return
        # Zero chunks inside a data extent (e.g. preallocated ones) stay holes in the copy.
        if data.count(0) != len(data):
            os.pwrite(dst, data, position)
        position += len(data)


# --- loop ----------------------------------------------------------------------------------------


def _loop_config(backing_fd: int, flags: int, name: bytes) -> bytes:
    info = _LOOP_INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, flags, name, b"", b"", 0, 0)
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


def _read_tag(device: str) -> str | None:
    """lo_file_name of a configured device; None when it is not (or no longer) configured."""
    fd = _open_loop(device, os.O_RDONLY)
    if fd is None:
        return None
    try:
        buf = bytearray(_LOOP_INFO64.size)
        try:
            fcntl.ioctl(fd, LOOP_GET_STATUS64, buf, True)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return None
            raise
    finally:
        os.close(fd)
    name = _LOOP_INFO64.unpack(bytes(buf))[_LO_FILE_NAME_INDEX]
    assert isinstance(name, bytes)
    return name.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _configured_loop_indices() -> list[int]:
    indices: list[int] = []
    for entry in os.scandir(_SYS_BLOCK):
        match = _LOOP_NAME.fullmatch(entry.name)
        # loop/ exists in sysfs only while a backing file is attached.
        if match and os.path.exists(f"{_SYS_BLOCK}/{entry.name}/loop/backing_file"):
            indices.append(int(match.group(1)))
    return sorted(indices)


def _describe(index: int, tag: str) -> LoopDevice | None:
    base = f"{_SYS_BLOCK}/loop{index}"
    backing = _read_sys(f"{base}/loop/backing_file")
    read_only = _read_sys(f"{base}/ro")
    sectors = _read_sys(f"{base}/size")
    if backing is None or read_only is None or sectors is None:
        return None
    return LoopDevice(
        path=f"/dev/loop{index}",
        backing_file=backing,
        tag=tag,
        read_only=read_only.strip() == "1",
        size_bytes=int(sectors) * 512,
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
    def __init__(self) -> None:
        # tag → index of the device last seen carrying it. find() asks that one device first
        # instead of opening every loop device on the host; the answer is checked on every use
        # (the device must carry the tag right now), so a stale hint only costs the full scan.
        self._hints: dict[str, int] = {}

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        name = encode_tag(tag)
        flags = LO_FLAGS_READ_ONLY if read_only else 0
        with _ATTACH_LOCK:
            existing = self.find(tag)
            if existing is not None:
                return existing
            mode = os.O_RDONLY if read_only else os.O_RDWR
            backing_fd = os.open(backing_file, mode | os.O_CLOEXEC)
            try:
                control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
                try:
                    for _ in range(_ATTACH_ATTEMPTS):
                        index = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
                        device = f"/dev/loop{index}"
                        _wait_for_node(device)
                        if not _configure(device, backing_fd, flags, name):
                            log.debug("%s was taken by someone else; asking for another", device)
                            continue
                        described = _describe(index, tag)
                        if described is None:
                            raise OSError(errno.ENXIO, "detached right after attach", device)
                        log.info("attached %s to %s as %r", backing_file, device, tag)
                        self._hints[tag] = index
                        return described
                finally:
                    os.close(control)
            finally:
                os.close(backing_fd)
        raise OSError(errno.EBUSY, f"no free loop device after {_ATTACH_ATTEMPTS} attempts")

    def find(self, tag: str) -> LoopDevice | None:
        hint = self._hints.get(tag)
        if hint is not None:
            if _read_tag(f"/dev/loop{hint}") == tag:
                hinted = _describe(hint, tag)
                if hinted is not None:
                    return hinted
            self._hints.pop(tag, None)
        for device in self._devices(lambda candidate: candidate == tag):
            self._hints[tag] = loop_index(device.path)
            return device
        return None

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        return list(self._devices(lambda candidate: candidate.startswith(tag_prefix)))

    def _devices(self, wanted: Callable[[str], bool]) -> Iterator[LoopDevice]:
        for index in _configured_loop_indices():
            tag = _read_tag(f"/dev/loop{index}")
            if tag is None or not wanted(tag):
                continue
            device = _describe(index, tag)
            if device is not None:
                yield device

    def detach(self, device: str) -> None:
        index = loop_index(device)
        for tag, hinted in list(self._hints.items()):
            if hinted == index:
                self._hints.pop(tag, None)
        fd = _open_loop(device, os.O_RDONLY)
        if fd is None:
            return  # gone, or already being released
        try:
            # A read-only flag set with BLKROSET outlives the attachment and would make the next
            # volume on this device unformattable, so it goes before the device is released.
            if _read_sys(f"{_SYS_BLOCK}/loop{index}/ro") == "1":
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
        log.info("detached %s", device)

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


# --- mountinfo -----------------------------------------------------------------------------------

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
MOUNTINFO = "/proc/self/mountinfo"
# id, parent, major:minor, root, mount point, options, "-", type, source, super options
_MOUNTINFO_MIN_FIELDS = 10


def unescape_mountinfo(field: str) -> str:
    """Undo the kernel's octal escapes (space, tab, newline, backslash) in a mountinfo field."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


@dataclass(frozen=True, slots=True)
class MountRecord:
    """A mountinfo line with the ids that say which mount sits on which."""

    mount_id: int
    parent_id: int
    entry: MountEntry


def parse_mountinfo(text: str) -> list[MountRecord]:
    records: list[MountRecord] = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < _MOUNTINFO_MIN_FIELDS:
            continue
        # Optional fields (shared:N, master:N, ...) run from field 7 up to a lone "-".
        try:
            separator = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < separator + 3:
            continue
        records.append(
            MountRecord(
                mount_id=int(fields[0]),
                parent_id=int(fields[1]),
                entry=MountEntry(
                    mount_point=unescape_mountinfo(fields[4]),
                    source=unescape_mountinfo(fields[separator + 2]),
                    fs_type=unescape_mountinfo(fields[separator + 1]),
                    device_number=fields[2],
                    root=unescape_mountinfo(fields[3]),
                    options=tuple(fields[5].split(",")),
                ),
            )
        )
    return records


def read_mountinfo() -> list[MountRecord]:
    with open(MOUNTINFO, "rb") as handle:
        # surrogateescape, like os.fsdecode: paths compare equal to what os.path functions return.
        return parse_mountinfo(handle.read().decode("utf-8", errors="surrogateescape"))


def escape_mountinfo(path: str) -> str:
    """The kernel's escape of a path in mountinfo (seq_path with " \\t\\n\\\\"): the inverse of
    unescape_mountinfo for every path the kernel prints."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def read_mountinfo_at(mount_point: str) -> list[MountRecord]:
    """The records of read_mountinfo() whose mount point is mount_point, without parsing the
    others: a find costs the same with 10 mounts on the node or with 1000."""
    wanted = os.fsencode(escape_mountinfo(mount_point))
    with open(MOUNTINFO, "rb") as handle:
        text = handle.read()
    lines = [line for line in text.split(b"\n") if line.split(b" ", 5)[4:5] == [wanted]]
    return parse_mountinfo(b"\n".join(lines).decode("utf-8", errors="surrogateescape"))


def topmost(records: Sequence[MountRecord], mount_point: str) -> MountEntry | None:
    """The entry at mount_point that nothing else is mounted on."""
    matches = [record for record in records if record.entry.mount_point == mount_point]
    if not matches:
        return None
    covered = {record.parent_id for record in matches}
    uncovered = [record for record in matches if record.mount_id not in covered]
    return (uncovered or matches)[-1].entry


# --- mount(2) and umount2(2) without spawning mount(8) -------------------------------------------
#
# mount(8) costs a fork, an exec and libmount's own parse of mountinfo: 1-2 ms a call, on every
# stage, publish, unpublish and unstage. The calls the driver makes go straight to the kernel with
# the arguments mount(8) itself passes (util-linux 2.38 under strace):
#   mount -t xfs -o OPTS DEV DIR   →  mount(realpath(DEV), realpath(DIR), "xfs", <the VFS
#                                     flags of OPTS>, <its other options in order, or NULL>)
#   mount --bind SRC DIR           →  mount(realpath(SRC), realpath(DIR), NULL, MS_BIND, NULL)
#   mount -o remount,bind,ro DIR   →  mount(.., DIR, .., MS_REMOUNT|MS_BIND|MS_RDONLY|<the
#                                     per-mount flags mountinfo shows for DIR>, NULL)
#   umount [-l] DIR                →  umount2(DIR, 0 or MNT_DETACH)
# Anything else (a filesystem option not in _FS_DATA_OPTIONS, userspace options, a source that is
# not a block device, a mount libmount tracks in utab) goes to the tool, and so does every call the
# kernel refuses: the tool then fails the same way and raises the same CommandError, with mount(8)'s
# own message.

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_SYNCHRONOUS = 0x10
MS_REMOUNT = 0x20
MS_DIRSYNC = 0x80
MS_NOSYMFOLLOW = 0x100
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
MS_LAZYTIME = 0x2000000
MNT_DETACH = 0x2

# mount(8)'s VFS options (libmount's optmap): name → (flag, set it or clear it).
_VFS_OPTIONS: dict[str, tuple[int, bool]] = {
    "defaults": (0, True),
    "ro": (MS_RDONLY, True),
    "rw": (MS_RDONLY, False),
    "nosuid": (MS_NOSUID, True),
    "suid": (MS_NOSUID, False),
    "nodev": (MS_NODEV, True),
    "dev": (MS_NODEV, False),
    "noexec": (MS_NOEXEC, True),
    "exec": (MS_NOEXEC, False),
    "sync": (MS_SYNCHRONOUS, True),
    "async": (MS_SYNCHRONOUS, False),
    "dirsync": (MS_DIRSYNC, True),
    "noatime": (MS_NOATIME, True),
    "atime": (MS_NOATIME, False),
    "nodiratime": (MS_NODIRATIME, True),
    "diratime": (MS_NODIRATIME, False),
    "relatime": (MS_RELATIME, True),
    "norelatime": (MS_RELATIME, False),
    "strictatime": (MS_STRICTATIME, True),
    "nostrictatime": (MS_STRICTATIME, False),
    "lazytime": (MS_LAZYTIME, True),
    "nolazytime": (MS_LAZYTIME, False),
    "nosymfollow": (MS_NOSYMFOLLOW, True),
    "symfollow": (MS_NOSYMFOLLOW, False),
}
# The per-mount flags the kernel prints in mountinfo field 6, which libmount carries over into a
# remount; "rw" is the absence of MS_RDONLY.
_MOUNTINFO_FLAGS: dict[str, int] = {
    "rw": 0,
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "nosymfollow": MS_NOSYMFOLLOW,
}
# Filesystem options mount(8) hands to the kernel as they are (the data argument, in order),
# with no meaning to libmount itself; others (x-*, _netdev, loop, offset=, ...) go to the tool.
_FS_DATA_OPTIONS: dict[str, frozenset[str]] = {
    "ext4": frozenset({"discard", "nodiscard"}),
    "xfs": frozenset({"nouuid", "discard", "nodiscard"}),
}
_FAST_FS_TYPES = tuple(_FS_DATA_OPTIONS)
UTAB = "/run/mount/utab"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.mount.restype = ctypes.c_int
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.umount2.restype = ctypes.c_int


def _check(result: int, what: str, path: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}", path)


def sys_mount(
    source: str | None, target: str, fs_type: str | None, flags: int, data: str = ""
) -> None:
    """mount(2); data is the filesystem's option string (NULL when empty). OSError if the kernel
    refuses."""
    # ctypes drops the GIL for the call, so a slow mount does not stall the other RPCs.
    _check(
        _libc.mount(
            None if source is None else os.fsencode(source),
            os.fsencode(target),
            None if fs_type is None else fs_type.encode(),
            flags,
            ctypes.c_char_p(data.encode()) if data else None,
        ),
        "mount(2)",
        target,
    )


def sys_umount(target: str, flags: int) -> None:
    """umount2(2); OSError if the kernel refuses."""
    _check(_libc.umount2(os.fsencode(target), flags), "umount2(2)", target)


def mount_arguments(fs_type: str, options: Sequence[str]) -> tuple[int, str] | None:
    """The (flags, data) mount(8) passes to mount(2) for `-t fs_type -o options`, or None when
    an option needs mount(8) itself (userspace options, or ones this table does not know)."""
    joined = ",".join(options)
    flags = 0
    data: list[str] = []
    for option in joined.split(",") if joined else []:
        known = _VFS_OPTIONS.get(option)
        if known is not None:
            bit, on = known
            flags = flags | bit if on else flags & ~bit
        elif option in _FS_DATA_OPTIONS.get(fs_type, ()):
            data.append(option)
        else:
            return None
    return flags, ",".join(data)


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _in_utab(path: str) -> bool:
    """Whether libmount keeps userspace state for the mount at path (then umount(8) must clean it
    up, so the mount is left to the tool)."""
    try:
        with open(UTAB, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return False
    wanted = "TARGET=" + path
    return any(unescape_mountinfo(field) == wanted for line in lines for field in line.split(" "))


def _fast_mount(device: str, target: str, fs_type: str, options: Sequence[str]) -> bool:
    arguments = mount_arguments(fs_type, options)
    if arguments is None or fs_type not in _FAST_FS_TYPES or not _is_block_device(device):
        return False
    flags, data = arguments
    try:
        sys_mount(os.path.realpath(device), os.path.realpath(target), fs_type, flags, data)
    except OSError as exc:
        log.debug("%s; leaving it to mount(8)", exc)
        return False
    return True


def _fast_bind(source: str, target: str) -> bool:
    try:
        sys_mount(os.path.realpath(source), os.path.realpath(target), None, MS_BIND)
    except OSError as exc:
        log.debug("%s; leaving it to mount(8)", exc)
        return False
    return True


def _fast_remount_read_only(target: str) -> bool:
    path = os.path.realpath(target)
    entry = topmost(read_mountinfo_at(path), path)
    if entry is None:
        return False
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for option in entry.options:
        bit = _MOUNTINFO_FLAGS.get(option)
        if bit is None:  # a per-mount flag this table does not know: keep mount(8)'s merge
            return False
        flags |= bit
    try:
        sys_mount(None, path, None, flags)
    except OSError as exc:
        log.debug("%s; leaving it to mount(8)", exc)
        return False
    return True


def _fast_unmount(path: str, lazy: bool) -> bool:
    if _in_utab(path):
        return False
    try:
        sys_umount(path, MNT_DETACH if lazy else 0)
    except OSError as exc:
        log.debug("%s; leaving it to umount(8)", exc)
        return False
    return True


class LinuxMounts:
    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None:
        if _fast_mount(device, target, fs_type, options):
            return
        argv = ["mount", "-t", fs_type]
        if options:
            argv += ["-o", ",".join(options)]
        run([*argv, device, target])

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        if not _fast_bind(source, target):
            run(["mount", "--bind", source, target])
        if not read_only:
            return
        # A bind can't be made read-only in the same call; if the remount fails, don't leave a
        # writable bind behind where a read-only one was asked for.
        try:
            if not _fast_remount_read_only(target):
                run(["mount", "-o", "remount,bind,ro", target])
        except CommandError:
            run(["umount", target])
            raise

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        path = os.path.realpath(target)
        if self.find(path) is None:
            return
        try:
            if not _fast_unmount(path, lazy):
                run(["umount", "-l", path] if lazy else ["umount", path])
        except CommandError:
            if self.find(path) is None:  # someone else unmounted it meanwhile
                return
            raise

    def find(self, target: str) -> MountEntry | None:
        path = os.path.realpath(target)
        return topmost(read_mountinfo_at(path), path)

    def list(self) -> list[MountEntry]:
        return [record.entry for record in read_mountinfo()]


# --- filesystems ---------------------------------------------------------------------------------


def _open_loop_mount(mount_point: str) -> int:
    """Open the root of a loop-backed mount, refusing anything else.

    Shutdown and freeze act on the whole filesystem under the path: called by mistake on a path
    that is not mounted, they would hit the node's root filesystem. So the fd must be the mount
    root at mount_point, on a loop device.
    """
    path = os.path.realpath(mount_point)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        device_number = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        entry = topmost(read_mountinfo_at(path), path)
        is_loop = os.path.isdir(f"/sys/dev/block/{device_number}/loop")
        if entry is None or entry.device_number != device_number or not is_loop:
            raise ValueError(f"{mount_point} is not a mount of a loop device")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _decode_dev(encoded: int) -> tuple[int, int]:
    """(major, minor) of a dev_t in the kernel's new_encode_dev form (loop_info64.lo_device)."""
    return (encoded & 0xFFF00) >> 8, (encoded & 0xFF) | ((encoded >> 12) & 0xFFF00)


def _reads_as_zeros(device: str) -> bool:
    """True only if every byte of device reads as zero: a loop device, at offset 0, on a backing
    file without a single data extent (a fresh sparse volume). blkid can find nothing on such a
    device, so probing it needs no blkid. Anything this can't prove answers False.
    """
    try:
        index = loop_index(device)
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except (ValueError, OSError):
        return False
    try:
        buf = bytearray(_LOOP_INFO64.size)
        try:
            fcntl.ioctl(fd, LOOP_GET_STATUS64, buf, True)
        except OSError:
            return False
        lo_device, lo_inode, _rdevice, lo_offset = _LOOP_INFO64.unpack(bytes(buf))[:4]
        backing = _read_sys(f"{_SYS_BLOCK}/loop{index}/loop/backing_file")
        if lo_offset != 0 or backing is None:
            return False
        try:
            # Buffered writes to the device sit in its page cache, where blkid would see them;
            # the fsync moves them to the backing file, where SEEK_DATA sees them.
            os.fsync(fd)
            backing_fd = os.open(backing, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            st = os.fstat(backing_fd)
            # The path in sysfs could name another file by now (renamed, or " (deleted)").
            if (st.st_ino, (os.major(st.st_dev), os.minor(st.st_dev))) != (
                lo_inode,
                _decode_dev(lo_device),
            ):
                return False
            try:
                os.lseek(backing_fd, 0, os.SEEK_DATA)
            except OSError as exc:
                return exc.errno == errno.ENXIO  # no data at or after offset 0: all holes
            return False
        finally:
            os.close(backing_fd)
    finally:
        os.close(fd)


class LinuxFs:
    def probe(self, device: str) -> str | None:
        # blkid answers "nothing found" (2) for a missing device too; a volume must never look
        # blank just because its device is gone.
        os.stat(device)
        if _reads_as_zeros(device):
            return None  # what blkid answers for a device of zeros, without spawning it
        try:
            out = run(["blkid", "-p", "-o", "export", device])
        except CommandError as exc:
            if exc.returncode == _BLKID_NOTHING_FOUND:
                return None
            raise
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if "TYPE" in values:
            return values["TYPE"]
        if "PTTYPE" in values:
            # Not a filesystem, but not blank either: a caller that formats "blank" devices must
            # not wipe a partition table a block-volume user wrote.
            return f"partition-table:{values['PTTYPE']}"
        return None

    def mkfs(self, device: str, fs_type: str) -> None:
        if fs_type not in _MKFS:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")
        run([*_MKFS[fs_type], device], timeout=_FS_TOOL_TIMEOUT)

    def grow(self, device: str, mount_point: str, fs_type: str) -> None:
        if fs_type == "ext4":
            run(["resize2fs", device], timeout=_FS_TOOL_TIMEOUT)
        elif fs_type == "xfs":
            run(["xfs_growfs", mount_point], timeout=_FS_TOOL_TIMEOUT)
        else:
            raise ValueError(f"unsupported filesystem type {fs_type!r}")

    def size(self, device: str) -> int | None:
        with open(device, "rb") as f:
            head = f.read(_EXT4_SB_OFFSET + _EXT4_SB_SIZE)
        if len(head) >= _EXT4_SB_OFFSET + _EXT4_SB_SIZE:
            sb = head[_EXT4_SB_OFFSET:]
            if sb[0x38:0x3A] == b"\x53\xef":  # the ext2/3/4 magic, little-endian 0xEF53
                (blocks_lo,) = struct.unpack_from("<I", sb, 0x04)
                (log_block_size,) = struct.unpack_from("<I", sb, 0x18)
                (incompat,) = struct.unpack_from("<I", sb, 0x60)
                blocks_hi = struct.unpack_from("<I", sb, 0x150)[0] if incompat & 0x80 else 0
                return int(((blocks_hi << 32) | blocks_lo) * (1024 << log_block_size))
        if head[:4] == b"XFSB":
            (block_size,) = struct.unpack_from(">I", head, 4)
            (data_blocks,) = struct.unpack_from(">Q", head, 8)
            return int(block_size * data_blocks)
        return None

    def grow_offline(self, device: str, fs_type: str) -> None:
        if fs_type != "ext4":
            raise ValueError(f"offline grow is for ext4 only, not {fs_type!r}")
        try:
            # -p repairs only what is safe without asking; resize2fs refuses an unchecked fs.
            run(["e2fsck", "-f", "-p", device], timeout=_FS_TOOL_TIMEOUT)
        except CommandError as exc:
            if exc.returncode not in (1, 2):  # 1 and 2: errors corrected
                raise
        run(["resize2fs", device], timeout=_FS_TOOL_TIMEOUT)

    def error_count(self, device: str) -> int:
        raw = _read_sys(f"/sys/fs/ext4/{os.path.basename(device)}/errors_count")
        return int(raw) if raw and raw.isdigit() else 0

    def stats(self, path: str) -> FsStats:
        st = os.statvfs(path)
        return FsStats(
            total_bytes=st.f_blocks * st.f_frsize,
            available_bytes=st.f_bavail * st.f_frsize,
            used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
            total_inodes=st.f_files,
            free_inodes=st.f_ffree,
            used_inodes=st.f_files - st.f_ffree,
        )

    def shutdown(self, mount_point: str) -> None:
        try:
            fd = _open_loop_mount(mount_point)
        except OSError as exc:
            if exc.errno == errno.EIO:
                # A filesystem already shut down refuses even to open its root: that is the
                # state we want, so a retried fence succeeds.
                log.warning("%s answers EIO; taking it as already shut down", mount_point)
                return
            raise
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", FS_SHUTDOWN_NOSYNC))
        finally:
            os.close(fd)
        log.warning("filesystem at %s shut down: every later write fails with EIO", mount_point)

    def freeze(self, mount_point: str) -> None:
        fd = _open_loop_mount(mount_point)
        try:
            fcntl.ioctl(fd, FIFREEZE, 0)
        finally:
            os.close(fd)

    def thaw(self, mount_point: str) -> None:
        fd = _open_loop_mount(mount_point)
        try:
            fcntl.ioctl(fd, FITHAW, 0)
        finally:
            os.close(fd)


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


def linux_system(pool_root: Path) -> System:
    return System(
        pool=LinuxPool(pool_root),
        loop=LinuxLoop(),
        fs=LinuxFs(),
        mounts=LinuxMounts(),
        devices=LinuxDevices(),
    )
