"""A reserved headroom file in the state directory, given back when a teardown needs the room.

The default layout puts the pool beside state.db, so thin volumes can fill the filesystem that
holds the database. Then every teardown RPC did its system step and failed its commit ("database
or disk is full"), and DeleteVolume refused a volume still published: no API path could free
space. The headroom is real allocated blocks, so releasing it guarantees room for the commits and
lease files that teardown writes; it is taken back once the filesystem has room again."""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.store._log import log

HEADROOM_BYTES = 4 << 20
NAME = ".headroom"


class Headroom:
    def __init__(self, state_dir: Path, size: int = HEADROOM_BYTES) -> None:
        self.path = state_dir / NAME
        self.size = size

    def present(self) -> bool:
        try:
            return self.path.stat().st_size >= self.size
        except FileNotFoundError:
            return False

    def ensure(self) -> bool:
        """Reserve the headroom unless it is held already or the filesystem can't spare it
        (then a later pass tries again). True when it is held."""
        if self.present():
            return True
        st = os.statvfs(self.path.parent)
        if st.f_bavail * st.f_frsize < 2 * self.size:
            return False
        tmp = self.path.with_name(NAME + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)  # real blocks: a sparse file reserves nothing
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.warning("could not reserve %d bytes of headroom in %s: %s", self.size, tmp, e)
            return False
        return True

    def release(self) -> bool:
        """Give the headroom back to the filesystem; True if there was some to give."""
        if not self.path.exists():
            return False
        self.path.unlink(missing_ok=True)
        log.warning(
            "the state filesystem at %s is full: released %d bytes of reserved headroom so "
            "teardown can commit; free space there (the pool shares it by default)",
            self.path.parent,
            self.size,
        )
        return True
