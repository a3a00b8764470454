"""The store's one sqlite connection: WAL with synchronous=FULL, so a commit that returned is
on disk; BEGIN IMMEDIATE for every write, which takes the write lock before reading, so two
processes (the controller and a `ledger` command) can't both decide on the same stale rows."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from csi_hostpath.store import private
from csi_hostpath.store.migrations import migrate, version

# The meta key of the ID a database takes when it first claims a pool (store/backing/owner.py).
DB_ID_KEY = "db_id"


def peek_database_id(path: Path) -> str | None:
    """The ID the database at path took when it claimed a pool, read-only (None: no database
    there, one that can't be read, or one that never claimed a pool, such as a node plugin's)."""
    if not path.is_file():
        return None
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=1)
        ) as c:
            row = c.execute("SELECT value FROM meta WHERE key=?", (DB_ID_KEY,)).fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


class Connection:
    """read_only: for the commands that only look (ledger list, inspect, doctor): the database
    is opened with sqlite's mode=ro, never migrated, and a write through it fails; a database
    of an older schema is refused with the next step (StateOutdated) rather than upgraded."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()
        if read_only:
            self._db = private.open_read_only(path)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout=30000")
            private.check_schema(version(self._db), path)
            return
        private.create_private(path)
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            migrate(self._db, path)
        # The -wal and -shm files exist now; an older driver may have left any of them 0644.
        private.tighten_database(path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def database_id(self) -> tuple[str, bool]:
        """This database's ID, created on first use; and whether the database is empty (no volume
        and no snapshot: a new, emptied or truncated state.db). One writer decides the ID."""
        with self._tx() as db:
            rows = db.execute(
                "SELECT (SELECT COUNT(*) FROM volumes) + (SELECT COUNT(*) FROM snapshots)"
            ).fetchone()[0]
            row = db.execute("SELECT value FROM meta WHERE key=?", (DB_ID_KEY,)).fetchone()
            if row is not None:
                return str(row["value"]), rows == 0
            new = uuid.uuid4().hex
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (DB_ID_KEY, new))
            return new, rows == 0
