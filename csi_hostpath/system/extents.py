"""Where a file's data is: data extents (SEEK_DATA/SEEK_HOLE) and physical extents (FIEMAP), so
changed-block tracking reads only what may differ, and nothing that two reflinked snapshots
share."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
# Extents whose physical address means nothing to compare (not yet written, encoded, inline).
FIEMAP_UNCOMPARABLE = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_HEAD = struct.Struct("=QQIIII")
_EXTENT = struct.Struct("=QQQ2Q4I")
_BATCH = 512

Range = tuple[int, int]
Physical = tuple[int, int, int]  # logical offset, physical offset, length


def data_extents(path: Path) -> list[Range]:
    """The file's data ranges; holes read as zeros and are left out."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        found: list[Range] = []
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after offset
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            found.append((start, end - start))
            offset = end
        return found
    finally:
        os.close(fd)


def physical_extents(path: Path) -> list[Physical] | None:
    """The file's mapped extents with their physical addresses, or None where the filesystem
    has no FIEMAP (tmpfs). Flushes delayed allocation first, so addresses are real."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        found: list[Physical] = []
        start = 0
        while True:
            buf = bytearray(_HEAD.size + _EXTENT.size * _BATCH)
            _HEAD.pack_into(buf, 0, start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC, 0, _BATCH, 0)
            try:
                fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL):
                    return None
                raise
            mapped = _HEAD.unpack_from(buf, 0)[3]
            if mapped == 0:
                return found
            last = False
            for i in range(mapped):
                logical, physical, length, _, _, flags, *_ = _EXTENT.unpack_from(
                    buf, _HEAD.size + i * _EXTENT.size
                )
                if not flags & FIEMAP_UNCOMPARABLE:
                    found.append((logical, physical, length))
                start = logical + length
                last = last or bool(flags & FIEMAP_EXTENT_LAST)
            if last:
                return found
    finally:
        os.close(fd)


def shared_ranges(a: list[Physical], b: list[Physical]) -> list[Range]:
    """Logical ranges that both files map to the same physical blocks (reflinked, so equal)."""
    shared: list[Range] = []
    i = j = 0
    while i < len(a) and j < len(b):
        a_log, a_phys, a_len = a[i]
        b_log, b_phys, b_len = b[j]
        start, end = max(a_log, b_log), min(a_log + a_len, b_log + b_len)
        if start < end and a_phys - a_log == b_phys - b_log:
            shared.append((start, end - start))
        if a_log + a_len <= b_log + b_len:
            i += 1
        else:
            j += 1
    return shared
