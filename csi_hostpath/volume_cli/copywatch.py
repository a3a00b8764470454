"""How far a copy in the pool has got, for the spinner: the driver copies a backing file's data
extents into `<id>.img.tmp` beside the destination and renames it when done, so the bytes
allocated to the .tmp files, against those allocated to the source, say how far it is. Only a
reading of the pool; a pool this command can't read just shows no figure."""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.core.sizes import format_bytes


def allocated(path: Path) -> int | None:
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return None


class CopyWatch:
    def __init__(self, source: Path, dest_dir: Path) -> None:
        self.dest_dir = dest_dir
        self.total = allocated(source)

    def copied(self) -> int:
        try:
            names = [n for n in os.listdir(self.dest_dir) if n.endswith(".img.tmp")]
        except OSError:
            return 0
        return sum(allocated(self.dest_dir / n) or 0 for n in names)

    def detail(self) -> str:
        if not self.total:
            return ""
        done = min(self.copied(), self.total)
        return f"{format_bytes(done)} of {format_bytes(self.total)} ({100 * done // self.total}%)"
