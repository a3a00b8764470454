"""Mounts made, found and taken down through descriptors (system/pinned.py), never by a path
resolved again.

- A filesystem is mounted with mount(2) onto /proc/self/fd/N: the kernel follows that magic link
  to the object the descriptor holds, so a symlink exchanged into the path after it was opened
  changes nothing.
- A bind is a detached copy of the source's mount (open_tree(2) with OPEN_TREE_CLONE), made
  read-only while still detached (mount_setattr(2)) and then attached onto the target's
  descriptor (move_mount(2)): there is never a moment when a read-only bind is writable, and no
  second call has to find the new mount by its path to remount it.
- A mount is identified by its own ID, read from a descriptor of its root (statx(2)), described
  by statmount(2) (or its mountinfo line), and unmounted through that same descriptor.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.linux import statmount
from csi_hostpath.system.linux.mountinfo import read_mountinfo
from csi_hostpath.system.pinned import Pinned, SymlinkInPath

# The common syscall table's numbers (arch/*/entry/syscalls, scripts/syscall.tbl).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 0x1
_AT_EMPTY_PATH = 0x1000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOVE_MOUNT_T_EMPTY_PATH = 0x40
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR = struct.Struct("=QQQQ")  # attr_set, attr_clr, propagation, userns_fd

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, what: str, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def bind_onto(source: Pinned, target: Pinned, *, read_only: bool) -> None:
    """Bind source's object (a directory on a mount, or a device node) onto target's object.
    OSError as the kernel refuses; ENOSYS where the kernel has no mount API (before 5.12)."""
    tree = _syscall(
        _SYS_OPEN_TREE,
        "open_tree(2)",
        ctypes.c_int(source.fd),
        b"",
        ctypes.c_uint(_OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_EMPTY_PATH),
    )
    try:
        if read_only:
            attr = _MOUNT_ATTR.pack(_MOUNT_ATTR_RDONLY, 0, 0, 0)
            _syscall(
                _SYS_MOUNT_SETATTR,
                "mount_setattr(2)",
                ctypes.c_int(tree),
                b"",
                ctypes.c_uint(_AT_EMPTY_PATH),
                attr,
                ctypes.c_size_t(len(attr)),
            )
        _syscall(
            _SYS_MOVE_MOUNT,
            "move_mount(2)",
            ctypes.c_int(tree),
            b"",
            ctypes.c_int(target.fd),
            b"",
            ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH),
        )
    finally:
        os.close(tree)


def find_on(target: Pinned) -> MountEntry | None:
    """The mount whose root target's object is, or None when it is no mount's root. The answer
    is about the object, not its path: a mount elsewhere on the path's new destination is not
    it."""
    unique = target.mount_id(unique=True)
    if unique is not None:
        mount_id, is_root = unique
        if not is_root:
            return None
        try:
            return statmount.statmount(mount_id)
        except statmount.StatmountUnsupported:
            pass  # statmount(2) lacking or partial (before 6.11): mountinfo says the same
    old = target.mount_id(unique=False)
    if old is None:
        raise OSError(errno.ENOSYS, "statx(2) can't name the mount of a descriptor (Linux < 5.8)")
    mount_id, is_root = old
    if not is_root:
        return None
    for record in read_mountinfo():
        if record.mount_id == mount_id:
            return record.entry
    return None


def mount_of(obj: Pinned) -> int | None:
    """The ID of the mount whose root obj is, or None when obj is no mount's root."""
    found = obj.mount_id(unique=True) or obj.mount_id(unique=False)
    if found is None:
        raise OSError(errno.ENOSYS, "statx(2) can't name the mount of a descriptor (Linux < 5.8)")
    mount_id, is_root = found
    return mount_id if is_root else None


def mount_at(path: str) -> int | None:
    """mount_of for what path leads to now, its last component not followed; None when nothing
    is there or it is no mount's root."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        obj = Pinned(path, fd)  # closes fd itself when it refuses
    except SymlinkInPath:
        return None
    with obj:
        return mount_of(obj)
