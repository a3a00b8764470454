"""An exclusive flock taken without waiting: how one process at a time holds a directory."""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO


def hold_exclusive(path: Path) -> IO[bytes] | None:
    """path opened (created if missing) and flock'ed exclusively, held while the handle stays
    open; None, at once, when another process holds it."""
    handle = open(path, "ab")  # noqa: SIM115 - the caller holds it open
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
