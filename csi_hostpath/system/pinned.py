"""A path opened once, with no symbolic link in any component, and then acted on by descriptor.

A CO's staging and target paths lie in directories that others can write: a pod with a hostPath
of the kubelet's directory, or a local user. Checking a path and then mounting (or unmounting, or
removing) by its text resolves it twice, and a symlink exchanged in between (renameat2
RENAME_EXCHANGE, in a loop) wins that race: the mount lands on whatever the link points to. The
kubelet's subpath fix (CVE-2017-1002101, CVE-2021-25741) and runc's (CVE-2021-30465) close it the
same way, which is the way here too:

- the path is opened with O_PATH through openat2(2) with RESOLVE_NO_SYMLINKS, so no component,
  the last included, is ever a link (ELOOP otherwise): there is one resolution, and it fails
  rather than follow;
- what is checked (its kind, its entries, its mount) is read from that descriptor;
- the mount goes onto /proc/self/fd/N, which the kernel resolves to the very object the
  descriptor holds, wherever a rename has since moved it; an unmount goes through a descriptor of
  the mount's root, after the mount it names has been identified by what it is;
- a directory or file the driver makes or removes is made or removed relative to its parent's
  descriptor, never by a path resolved again.

Kernels before 5.6 have no openat2: the same walk is made a component at a time with
openat(O_PATH|O_NOFOLLOW), each component checked before the next is opened from it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from types import TracebackType
from typing import Self

_SYS_OPENAT2 = 437  # the same on every architecture of the common syscall table
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_OPEN_HOW = struct.Struct("=QQQ")  # flags, mode, resolve
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_NO_AUTOMOUNT = 0x800
_STATX_MNT_ID_UNIQUE = 0x4000
_STATX_MNT_ID = 0x1000
_STATX_ATTR_MOUNT_ROOT = 0x2000
_STATX_SIZE = 256
_STATX_ATTRIBUTES_OFFSET = 0x08  # stx_attributes, after stx_mask, stx_blksize
_STATX_ATTRIBUTES_MASK_OFFSET = 0x38  # stx_attributes_mask
_STATX_MNT_ID_OFFSET = 0x90

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
_libc.statx.restype = ctypes.c_int


class SymlinkInPath(OSError):
    """A component of the path is a symbolic link: it is never followed."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ELOOP, "a component is a symbolic link", path)


def _openat2(dir_fd: int, name: str) -> int:
    how = _OPEN_HOW.pack(_PATH_FLAGS, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    while True:
        fd = _libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(name), how, len(how))
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code == errno.EAGAIN:  # a rename raced the lookup: the kernel asks for a retry
            continue
        if code == errno.ENOSYS:  # before Linux 5.6 (nothing is kept: no module state)
            return _walk(dir_fd, name)
        raise OSError(code, os.strerror(code), name)


def _walk(dir_fd: int, name: str) -> int:
    """openat2's RESOLVE_NO_SYMLINKS a component at a time, for kernels without openat2."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    fd = os.open("/" if name.startswith("/") else ".", _PATH_FLAGS | os.O_DIRECTORY, dir_fd=dir_fd)
    try:
        for part in parts:
            nxt = os.open(part, _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
        return fd
    except BaseException:
        os.close(fd)
        raise


class Closing:
    """Closed at the end of a with block."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class Pinned(Closing):
    """One filesystem object, opened with O_PATH and no symbolic link followed. `path` is the
    text it was reached by (for messages and records); `fd` is what every act goes through."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        try:
            self.st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if stat.S_ISLNK(self.st.st_mode):
            # openat2 hands back the link itself when the last component is one (O_NOFOLLOW).
            os.close(fd)
            raise SymlinkInPath(path)

    @classmethod
    def open(cls, path: str) -> Pinned:
        """Open an absolute path; SymlinkInPath if any component is a link, FileNotFoundError
        (or another OSError) as the kernel says."""
        try:
            fd = _openat2(_AT_FDCWD, path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise SymlinkInPath(path) from e
            raise
        return cls(path, fd)

    def open_child(self, name: str) -> Pinned:
        """This directory's entry `name`, opened the same way: never a link."""
        try:
            fd = _openat2(self.fd, name)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise SymlinkInPath(os.path.join(self.path, name)) from e
            raise
        return Pinned(os.path.join(self.path, name), fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def proc(self) -> str:
        """The path the kernel resolves to this very object, for mount(2) and umount2(2)."""
        return f"/proc/self/fd/{self.fd}"

    def where(self) -> str:
        """Where the object is now (a rename may have moved it since it was opened)."""
        return os.readlink(self.proc)

    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)

    def refresh(self) -> os.stat_result:
        self.st = os.fstat(self.fd)
        return self.st

    def entries(self, limit: int = 3) -> list[str]:
        """Up to `limit` names in this directory (read through a descriptor opened from this
        one, not by path)."""
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            names: list[str] = []
            with os.scandir(fd) as it:
                for entry in it:
                    names.append(entry.name)
                    if len(names) >= limit:
                        break
            return names
        finally:
            os.close(fd)

    def make_dir(self, name: str, mode: int = 0o750) -> bool:
        """mkdirat(2) in this directory; False when something of that name is there already."""
        try:
            os.mkdir(name, mode, dir_fd=self.fd)
        except FileExistsError:
            return False
        return True

    def make_file(self, name: str, mode: int = 0o640) -> bool:
        """An empty file `name` in this directory, made with O_EXCL|O_NOFOLLOW; False when
        something of that name is there already (a link included: it is never followed)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, mode, dir_fd=self.fd)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def remove(self, name: str, *, directory: bool) -> None:
        """rmdir or unlink `name` in this directory: the kernel refuses a directory that holds
        anything or is a mount point."""
        if directory:
            os.rmdir(name, dir_fd=self.fd)
        else:
            os.unlink(name, dir_fd=self.fd)

    def child_stat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def mount_id(self, *, unique: bool = True) -> tuple[int, bool] | None:
        """(the ID of the mount this object is on, whether it is that mount's root), from
        statx(2) on the descriptor: the unique ID (Linux 6.8) for statmount(2), or the old,
        reusable one that mountinfo prints; None where the kernel can't say."""
        wanted = _STATX_MNT_ID_UNIQUE if unique else _STATX_MNT_ID
        buf = ctypes.create_string_buffer(_STATX_SIZE)
        if _libc.statx(self.fd, b"", _AT_EMPTY_PATH | _AT_NO_AUTOMOUNT, wanted, buf):
            return None
        (mask,) = struct.unpack_from("=I", buf.raw, 0)
        (attributes,) = struct.unpack_from("=Q", buf.raw, _STATX_ATTRIBUTES_OFFSET)
        (known,) = struct.unpack_from("=Q", buf.raw, _STATX_ATTRIBUTES_MASK_OFFSET)
        if not mask & wanted or not known & _STATX_ATTR_MOUNT_ROOT:
            return None
        (mount_id,) = struct.unpack_from("=Q", buf.raw, _STATX_MNT_ID_OFFSET)
        return int(mount_id), bool(attributes & _STATX_ATTR_MOUNT_ROOT)


def open_parent(path: str) -> tuple[Pinned, str]:
    """The parent directory of an absolute, normalised path, pinned, and the last component's
    name. FileNotFoundError when the parent is missing, SymlinkInPath when a link is on the way,
    NotADirectoryError when the parent is not a directory."""
    parent, name = os.path.split(path)
    pinned = Pinned.open(parent or "/")
    if not pinned.is_dir():
        pinned.close()
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), parent)
    return pinned, name
