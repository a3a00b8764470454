"""The schema upgrades: a database the first release wrote opens today with every row intact.

The schema upgrades: a database the first release wrote (tests/unit/data/schema_v1.sql, dumped
from that code) opens with today's code with every row intact, and is then at the newest version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from csi_hostpath.core.model import AccessMode
from csi_hostpath.store.db import Store
from csi_hostpath.store.migrations import MIGRATIONS, SCHEMA_VERSION, version

V1 = Path(__file__).parent / "data" / "schema_v1.sql"


def _turn_one_db(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(V1.read_text())
    db.executescript(
        """
        INSERT INTO volumes (volume_id, name, capacity_bytes, capabilities, fs_type, parameters,
            source_kind, source_id, node_id, created_at, generation)
        VALUES ('vol-1', 'pvc-1', 16777216,
            '[{"type": "mount", "mode": 1, "fs": "ext4", "flags": []}]',
            'ext4', '{}', NULL, NULL, NULL, 1700000000.0, 3);
        INSERT INTO snapshots (snapshot_id, name, source_volume_id, size_bytes, created_at, ready)
        VALUES ('snap-1', 'snapshot-1', 'vol-1', 16777216, 1700000001.0, 1);
        INSERT INTO publications (volume_id, node_id, access_mode, access_type, readonly,
            generation, published_at)
        VALUES ('vol-1', 'node-a', 1, 'mount', 0, 3, 1700000002.0);
        INSERT INTO audit (at, actor, action, volume_id, node_id, generation, reason)
        VALUES (1700000003.0, 'node:node-a', 'fenced', 'vol-1', 'node-a', 2, 'old fence');
        INSERT INTO node_staged (volume_id, staging_path, access_type, access_mode, fs_type,
            device, generation, staged_at, readonly)
        VALUES ('vol-1', '/var/lib/kubelet/x/globalmount', 'mount', 1, 'ext4', '/dev/loop7', 3,
            1700000004.0, 0);
        INSERT INTO node_published (target_path, volume_id, readonly, access_mode, access_type,
            mount_flags)
        VALUES ('/var/lib/kubelet/pods/p/mount', 'vol-1', 0, 1, 'mount', '[]');
        """
    )
    db.commit()
    db.close()


def test_the_turn_one_schema_upgrades_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _turn_one_db(path)
    store = Store(path)
    try:
        volume = store.get_volume("vol-1")
        assert volume is not None and volume.name == "pvc-1" and volume.capacity_bytes == 16 << 20
        assert store.generation("vol-1") == 3
        snapshot = store.get_snapshot("snap-1")
        assert snapshot is not None and snapshot.ready and snapshot.source_volume_id == "vol-1"
        (pub,) = store.publications("vol-1")
        assert (pub.node_id, pub.generation, pub.access_mode) == (
            "node-a",
            3,
            AccessMode.SINGLE_NODE_WRITER,
        )
        (entry,) = store.audit("vol-1")
        assert (entry.action, entry.reason) == ("fenced", "old fence")
        staged = store.get_staging("vol-1")
        assert staged is not None and staged.device == "/dev/loop7"
        assert [p.target_path for p in store.node_publications("vol-1")] == [
            "/var/lib/kubelet/pods/p/mount"
        ]
        # The new column works on the upgraded database: an event recorded twice is one row.
        for _ in range(2):
            store.record("node:node-b", "fenced", "vol-1", "node-b", 3, "new", "ev-1")
        assert [e.reason for e in store.audit("vol-1")] == ["old fence", "new"]
        # The running total of sizes starts as the sum of the rows the upgrade found.
        assert store.promised_bytes() == 16 << 20
        # No request was recorded before: the old snapshot reports its whole size, as it did.
        assert volume.requested_bytes == 0 and volume.restore_floor == 16 << 20
        assert snapshot.restore_bytes == 0 and snapshot.restore_floor == 16 << 20
        store.set_capacity("vol-1", 32 << 20, 30_000_000)
        grown = store.get_volume("vol-1")
        assert grown is not None and grown.restore_floor == 30_000_000
    finally:
        store.close()
    db = sqlite3.connect(path)
    assert version(db) == SCHEMA_VERSION == len(MIGRATIONS)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    db.close()


def test_a_fresh_database_has_the_same_schema_as_an_upgraded_one(tmp_path: Path) -> None:
    _turn_one_db(tmp_path / "old.db")
    Store(tmp_path / "old.db").close()
    Store(tmp_path / "new.db").close()

    def schema(path: Path) -> list[tuple[str, str]]:
        db = sqlite3.connect(path)
        try:
            rows = db.execute(
                "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"
            ).fetchall()
        finally:
            db.close()
        return [(str(name), " ".join(str(sql).split())) for name, sql in rows]

    assert schema(tmp_path / "old.db") == schema(tmp_path / "new.db")


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match="newer than this driver"):
        Store(path)


def test_opening_twice_migrates_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    store = Store(path)
    try:
        store.record("operator", "note", "vol-x", "", 0, "kept")
    finally:
        store.close()
    Store(path).close()
    store = Store(path)
    try:
        assert [e.reason for e in store.audit("vol-x")] == ["kept"]
    finally:
        store.close()
