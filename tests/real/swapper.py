"""A process that exchanges pairs of paths with renameat2(RENAME_EXCHANGE) in a loop, as fast as
it can, until it is told to stop: an adversary racing the driver's check against its use.

Each pair is (a real directory or file the CO made, a symbolic link to a victim's stand-in),
both in one directory, so that at any instant the CO's path leads either to the real object or,
through the link, to the victim. Run as `python -m tests.real.swapper A1 B1 [A2 B2 ...]`; on
SIGTERM it prints the number of exchanges made and exits.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _loop(pairs: list[tuple[bytes, bytes]]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    stop = False

    def stopped(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopped)
    swaps = 0
    while not stop:
        for a, b in pairs:
            # An odd number of exchanges of a pair leaves it swapped; the loop ends on an even
            # one per pair where it can, and the test restores the rest itself.
            if libc.renameat2(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) == 0:
                swaps += 1
    return swaps


class Swapper:
    """The swapping process, started and stopped by a test."""

    def __init__(self, pairs: Sequence[tuple[Path, Path]]) -> None:
        self.pairs = list(pairs)
        args = [str(p) for pair in self.pairs for p in pair]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.real.swapper", *args],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        self.swaps = 0

    def stop(self) -> int:
        """Stop it, put every pair back as it was made (the real object at its own name), and
        return the number of exchanges it made."""
        if self.process.poll() is None:
            self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        self.swaps = int(out.strip() or 0)
        for real, link in self.pairs:
            if os.path.islink(real):  # left swapped: exchange once more
                libc = ctypes.CDLL(None, use_errno=True)
                libc.renameat2(_AT_FDCWD, bytes(real), _AT_FDCWD, bytes(link), _RENAME_EXCHANGE)
        return self.swaps


def main(argv: list[str]) -> None:
    names = [os.fsencode(a) for a in argv]
    pairs = list(zip(names[::2], names[1::2], strict=True))
    print(_loop(pairs), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
