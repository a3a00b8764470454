"""One mount by its mount point, from the kernel, without reading /proc/self/mountinfo.

statx(2) with STATX_MNT_ID_UNIQUE walks the path (following mounts to the topmost one, as any
lookup of that path does) and names the mount it ended on; statmount(2) (Linux 6.8, the source
string since 6.11) then describes that one mount. Two syscalls whatever the number of mounts,
where mountinfo costs the kernel a line for every mount in the namespace and us a parse of it.

The answer is the same MountEntry the mountinfo line gives: the per-mount options are rebuilt
from mnt_attr in the order show_mnt_opts() in fs/proc_namespace.c prints them.

find() answers None when the path is no mount point (the walk ended on a mount whose mount point
is elsewhere), and raises StatmountUnsupported when the kernel can't answer this way (no
statmount, no unique mount IDs, a field it did not fill): the caller then reads mountinfo.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from csi_hostpath.system.base import MountEntry

# include/uapi/linux/stat.h, fcntl.h
_AT_FDCWD = -100
_AT_NO_AUTOMOUNT = 0x800
_STATX_MNT_ID_UNIQUE = 0x4000
_STATX_SIZE = 256
_STATX_MNT_ID_OFFSET = 0x90  # stx_mnt_id, after stx_dev_minor

# The syscall numbers of statmount(2) and listmount(2) are the same on every architecture that
# uses the common table (arch/*/entry/syscalls, scripts/syscall.tbl): 457 and 458.
_SYS_STATMOUNT = 457

# include/uapi/linux/mount.h
_STATMOUNT_SB_BASIC = 0x1
_STATMOUNT_MNT_BASIC = 0x2
_STATMOUNT_MNT_ROOT = 0x8
_STATMOUNT_MNT_POINT = 0x10
_STATMOUNT_FS_TYPE = 0x20
_STATMOUNT_FS_SUBTYPE = 0x100
_STATMOUNT_SB_SOURCE = 0x200
_WANTED = (
    _STATMOUNT_SB_BASIC
    | _STATMOUNT_MNT_BASIC
    | _STATMOUNT_MNT_ROOT
    | _STATMOUNT_MNT_POINT
    | _STATMOUNT_FS_TYPE
    | _STATMOUNT_FS_SUBTYPE
    | _STATMOUNT_SB_SOURCE
)
# Without these the entry can't be built; FS_SUBTYPE is set only when there is one.
_REQUIRED = _WANTED & ~_STATMOUNT_FS_SUBTYPE

_MNT_ID_REQ = struct.Struct("=IIQQ")  # size, spare, mnt_id, param: MNT_ID_REQ_SIZE_VER0 (24)
# struct statmount up to mnt_gidmap; the strings start at str[], 512 bytes in.
_STATMOUNT = struct.Struct("=IIQIIQIIQQIIQQQQQIIQIIIIIIQIIII")
_STATMOUNT_STR_OFFSET = 512
_BUFFER_SIZE = 8192

# MOUNT_ATTR_* → mountinfo's per-mount words, in show_mnt_opts() order.
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_NOEXEC = 0x8
_MOUNT_ATTR_NOATIME = 0x10
_MOUNT_ATTR_STRICTATIME = 0x20
_MOUNT_ATTR_NODIRATIME = 0x80
_MOUNT_ATTR_IDMAP = 0x100000
_MOUNT_ATTR_NOSYMFOLLOW = 0x200000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
_libc.statx.restype = ctypes.c_int


class StatmountUnsupported(Exception):
    """This path can't be answered with statx + statmount; kernel_wide when no path can."""

    def __init__(self, message: str, *, kernel_wide: bool = False) -> None:
        super().__init__(message)
        self.kernel_wide = kernel_wide


def mount_options(attr: int) -> tuple[str, ...]:
    """mnt_attr as mountinfo's sixth field prints it."""
    words = ["ro" if attr & _MOUNT_ATTR_RDONLY else "rw"]
    for bit, word in (
        (_MOUNT_ATTR_NOSUID, "nosuid"),
        (_MOUNT_ATTR_NODEV, "nodev"),
        (_MOUNT_ATTR_NOEXEC, "noexec"),
        (_MOUNT_ATTR_NOATIME, "noatime"),
        (_MOUNT_ATTR_NODIRATIME, "nodiratime"),
    ):
        if attr & bit:
            words.append(word)
    # MOUNT_ATTR_RELATIME is 0: relatime is neither noatime nor strictatime.
    if not attr & (_MOUNT_ATTR_NOATIME | _MOUNT_ATTR_STRICTATIME):
        words.append("relatime")
    if attr & _MOUNT_ATTR_NOSYMFOLLOW:
        words.append("nosymfollow")
    if attr & _MOUNT_ATTR_IDMAP:
        words.append("idmapped")
    return tuple(words)


def unique_mount_id(path: str) -> int | None:
    """The unique ID of the mount a lookup of path ends on; None when path does not exist."""
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _libc.statx(_AT_FDCWD, os.fsencode(path), _AT_NO_AUTOMOUNT, _STATX_MNT_ID_UNIQUE, buf):
        code = ctypes.get_errno()
        if code in (errno.ENOENT, errno.ENOTDIR):
            return None
        if code == errno.ENOSYS:
            raise StatmountUnsupported("no statx(2)", kernel_wide=True)
        raise StatmountUnsupported(f"statx(2) of {path}: {os.strerror(code)}")
    (mask,) = struct.unpack_from("=I", buf.raw, 0)
    if not mask & _STATX_MNT_ID_UNIQUE:
        raise StatmountUnsupported(
            "statx(2) gives no unique mount ID (Linux < 6.8)", kernel_wide=True
        )
    (mount_id,) = struct.unpack_from("=Q", buf.raw, _STATX_MNT_ID_OFFSET)
    assert isinstance(mount_id, int)
    return mount_id


def _string(raw: bytes, offset: int) -> str:
    start = _STATMOUNT_STR_OFFSET + offset
    end = raw.index(b"\0", start)
    return os.fsdecode(raw[start:end])


def statmount(mount_id: int) -> MountEntry | None:
    """The mount with that unique ID; None when it is gone (unmounted since the statx)."""
    request = _MNT_ID_REQ.pack(_MNT_ID_REQ.size, 0, mount_id, _WANTED)
    size = _BUFFER_SIZE
    while True:
        buf = ctypes.create_string_buffer(size)
        if _libc.syscall(_SYS_STATMOUNT, request, buf, size, 0) == 0:
            break
        code = ctypes.get_errno()
        if code == errno.EOVERFLOW and size < (1 << 20):
            size *= 4  # the strings did not fit
            continue
        if code == errno.ENOENT:
            return None
        raise StatmountUnsupported(
            f"statmount(2): {os.strerror(code)}", kernel_wide=code == errno.ENOSYS
        )
    raw = buf.raw
    fields = _STATMOUNT.unpack_from(raw, 0)
    mask, major, minor = fields[2], fields[3], fields[4]
    if mask & _REQUIRED != _REQUIRED:  # an older kernel: no sb_source before 6.11, say
        raise StatmountUnsupported(
            f"statmount(2) filled {mask:#x}, not {_REQUIRED:#x}", kernel_wide=True
        )
    fs_type_at, attr, root_at, point_at = fields[7], fields[12], fields[17], fields[18]
    subtype_at, source_at = fields[20], fields[21]
    fs_type = _string(raw, fs_type_at)
    if mask & _STATMOUNT_FS_SUBTYPE:
        fs_type += "." + _string(raw, subtype_at)
    return MountEntry(
        mount_point=_string(raw, point_at),
        source=_string(raw, source_at),
        fs_type=fs_type,
        device_number=f"{major}:{minor}",
        root=_string(raw, root_at),
        options=mount_options(attr),
    )


def find(path: str) -> MountEntry | None:
    """The topmost mount at path (already resolved, as mountinfo prints it), or None."""
    mount_id = unique_mount_id(path)
    if mount_id is None:
        return None
    entry = statmount(mount_id)
    if entry is None or entry.mount_point != path:
        return None
    return entry
