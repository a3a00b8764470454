"""The sqlite schema and its upgrades: `PRAGMA user_version` says which of MIGRATIONS a database
has had; opening it applies the rest, in order, each in its own transaction.

Rules for a new migration: append it (never edit or reorder a released one), make it work on a
database full of rows, and add a case to tests/unit/test_migrations.py. A database newer than the
code is refused: an older driver must not write state it does not understand.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Version 1 is the first release's schema (tests/unit/data/schema_v1.sql is its dump). That release
# stamped its version in meta.schema_version and left user_version at 0.
_V1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE volumes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    volume_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    capacity_bytes INTEGER NOT NULL,
    capabilities TEXT NOT NULL,
    fs_type TEXT NOT NULL,
    parameters TEXT NOT NULL,
    source_kind TEXT,
    source_id TEXT,
    node_id TEXT,
    created_at REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE snapshots (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    snapshot_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    source_volume_id TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    ready INTEGER NOT NULL
)""",
    """CREATE TABLE publications (
    volume_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    access_mode INTEGER NOT NULL,
    access_type TEXT NOT NULL,
    readonly INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    published_at REAL NOT NULL,
    PRIMARY KEY (volume_id, node_id)
)""",
    "CREATE INDEX publications_by_node ON publications (node_id)",
    """CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    volume_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    reason TEXT NOT NULL
)""",
    """CREATE TABLE node_staged (
    volume_id TEXT PRIMARY KEY,
    staging_path TEXT NOT NULL,
    access_type TEXT NOT NULL,
    access_mode INTEGER NOT NULL,
    fs_type TEXT NOT NULL,
    device TEXT NOT NULL,
    generation INTEGER NOT NULL,
    staged_at REAL NOT NULL,
    readonly INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE node_published (
    target_path TEXT PRIMARY KEY,
    volume_id TEXT NOT NULL,
    readonly INTEGER NOT NULL,
    access_mode INTEGER NOT NULL,
    access_type TEXT NOT NULL,
    mount_flags TEXT NOT NULL
)""",
)

# A node's fence is recorded by the node (in its own store) and reported through the pool's events
# directory to the controller's store. In --mode all those are one database: the event's id makes
# the import a no-op when the node already wrote the row, and when an import is retried.
_V2 = (
    "ALTER TABLE audit ADD COLUMN event_id TEXT",
    "CREATE UNIQUE INDEX audit_by_event ON audit (event_id) WHERE event_id IS NOT NULL",
)

# The sum of every volume's size, which the thin-capacity rule needs on each CreateVolume and
# GetCapacity: kept by triggers, so it changes in the same transaction as the row that moves it,
# whichever statement that is, instead of being summed over every row on each call.
_V3 = (
    """CREATE TABLE volume_totals (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    capacity_bytes INTEGER NOT NULL
)""",
    "INSERT INTO volume_totals (id, capacity_bytes) "
    "SELECT 0, COALESCE(SUM(capacity_bytes), 0) FROM volumes",
    """CREATE TRIGGER volume_totals_insert AFTER INSERT ON volumes BEGIN
    UPDATE volume_totals SET capacity_bytes = capacity_bytes + NEW.capacity_bytes WHERE id = 0;
END""",
    """CREATE TRIGGER volume_totals_delete AFTER DELETE ON volumes BEGIN
    UPDATE volume_totals SET capacity_bytes = capacity_bytes - OLD.capacity_bytes WHERE id = 0;
END""",
    """CREATE TRIGGER volume_totals_resize AFTER UPDATE OF capacity_bytes ON volumes BEGIN
    UPDATE volume_totals
    SET capacity_bytes = capacity_bytes - OLD.capacity_bytes + NEW.capacity_bytes WHERE id = 0;
END""",
)

# What the CO asked for, beside the rounded size the driver gave: a snapshot reports its source's
# request, so a restore into a claim of the source claim's size is not refused as too small. 0 in
# rows from before: their snapshots report their whole size, as they did.
_V4 = (
    "ALTER TABLE volumes ADD COLUMN requested_bytes INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE snapshots ADD COLUMN restore_bytes INTEGER NOT NULL DEFAULT 0",
)

# Derived state, derived again from the rows at every open: whatever wrote the file meanwhile (a
# hand edit, a restored copy), the total starts equal to the rows' sum.
_RECOUNT = (
    "UPDATE volume_totals SET capacity_bytes = (SELECT COALESCE(SUM(capacity_bytes), 0) "
    "FROM volumes) WHERE id = 0"
)

# MIGRATIONS[n] takes a database from version n to n + 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4)
SCHEMA_VERSION = len(MIGRATIONS)


def version(db: sqlite3.Connection) -> int:
    """The schema version of an open database: user_version, or the first release's stamp."""
    current = int(db.execute("PRAGMA user_version").fetchone()[0])
    if (
        current == 0
        and db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    ):
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is not None:
            current = int(row[0])
    return current


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the database (opened in autocommit mode) up to SCHEMA_VERSION."""
    while True:
        # BEGIN IMMEDIATE before reading the version: a second process opening the same database
        # waits here, then sees the version the first one left.
        db.execute("BEGIN IMMEDIATE")
        try:
            current = version(db)
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{path} has schema version {current}, newer than this driver's "
                    f"{SCHEMA_VERSION}: refusing to run an older driver on newer state"
                )
            if current == SCHEMA_VERSION:
                db.execute(_RECOUNT)
                db.execute("COMMIT")
                return
            for statement in MIGRATIONS[current]:
                db.execute(statement)
            # Both stamps: user_version for this code, meta for a first-release driver, which
            # then refuses the newer database instead of writing to it.
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(current + 1),),
            )
            db.execute(f"PRAGMA user_version = {current + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
