"""An exclusive flock taken without waiting: how one process at a time holds a directory."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


def hold_exclusive(path: Path) -> IO[bytes] | None:
    """path opened (created if missing) and flock'ed exclusively, held while the handle stays
    open; None, at once, when another process holds it."""
    # 0600: a lock file tells nothing, but what sits in a private directory stays private.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    handle = os.fdopen(fd, "ab")
    if os.fstat(fd).st_uid == os.geteuid():
        os.fchmod(fd, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle
