"""The pool on a real Linux kernel: sparse backing files, fsynced with their directory."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath.system.base import NoSpace
from csi_hostpath.system.linux.fs import statvfs_stats

FICLONE = 0x40049409

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


# --- pool ----------------------------------------------------------------------------------------


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
        with self._new_file(path, f"create {path} of {size_bytes} bytes") as fd:
            os.ftruncate(fd, size_bytes)

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
        src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with self._new_file(dest, f"copy {source} to {dest}") as dst:
                _copy_fd_sparse(src, dst)
        finally:
            os.close(src)

    @contextmanager
    def _new_file(self, path: Path, what: str) -> Iterator[int]:
        """The fd of a new file under a temporary name beside path, to fill in the block; then
        synced and renamed to path. On an error the temporary file is removed, and a full disk
        is NoSpace ("cannot <what>")."""
        tmp = _tmp_path(path)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                yield fd
                self._sync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if _is_no_space(exc):
                raise NoSpace(f"cannot {what}: {exc}") from exc
            raise
        self._sync_dir(path.parent)

    def free_bytes(self) -> int:
        return statvfs_stats(str(self._root)).available_bytes

    def writable(self) -> bool | None:
        if not self._root.is_dir():
            return None
        # access(2) fails with EROFS on a read-only mount, for root too.
        return os.access(self._root, os.W_OK)


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
