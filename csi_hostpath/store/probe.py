"""Readiness checks on the state directory that never wait behind the store's writer.

The store's own connection is never used here: an RPC thread may hold its lock for up to 30 s
waiting on sqlite's write lock (held by another process, e.g. a `ledger` command), and a probe
that waited behind it would have the liveness probe restart a healthy driver. A fresh read-only
connection reads the database (WAL readers never wait for a writer) with a short timeout, and a
real small write proves the state filesystem still takes data (a full disk answers not-ready).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

READ_TIMEOUT = 1.0
_WRITE_PROBE = b"\0" * 4096  # one page: enough to need a fresh block on a full filesystem


def read_check(db_path: Path, timeout: float = READ_TIMEOUT) -> None:
    """Raise sqlite3.Error/OSError unless the state database answers a read within `timeout`."""
    if not db_path.is_file():
        raise FileNotFoundError(f"{db_path} is missing")
    uri = f"file:{urllib.parse.quote(str(db_path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM meta").fetchone()
    finally:
        conn.close()


def write_check(directory: Path) -> None:
    """Raise OSError unless a new 4 KiB file can be written and synced in `directory`."""
    path = directory / f".probe-{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, _WRITE_PROBE)
        os.fsync(fd)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
