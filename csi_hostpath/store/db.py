"""Durable state in sqlite: volumes, snapshots, the publish ledger, the audit trail, and a node's
record of what it staged and published.

WAL with synchronous=FULL: a commit that returned is on disk. Decisions that must be atomic (the
ledger) run in BEGIN IMMEDIATE, which takes the write lock before reading, so two processes (the
controller and a `ledger` command) can't both decide on the same stale rows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csi_hostpath.core import ledger
from csi_hostpath.core.errors import BadPageToken, VolumeNotFound
from csi_hostpath.core.model import (
    AccessMode,
    AccessType,
    Capability,
    ContentSource,
    NodePublication,
    NodeStaging,
    Publication,
    Snapshot,
    Volume,
)
from csi_hostpath.store.migrations import migrate


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    at: float
    actor: str
    action: str
    volume_id: str
    node_id: str
    generation: int
    reason: str


def _caps_to_json(caps: tuple[Capability, ...]) -> str:
    return json.dumps(
        [
            {
                "type": c.access_type.value,
                "mode": int(c.access_mode),
                "fs": c.fs_type,
                "flags": list(c.mount_flags),
            }
            for c in caps
        ]
    )


def _caps_from_json(text: str) -> tuple[Capability, ...]:
    return tuple(
        Capability(AccessType(c["type"]), AccessMode(c["mode"]), c["fs"], tuple(c["flags"]))
        for c in json.loads(text)
    )


def _volume(row: sqlite3.Row) -> Volume:
    source = ContentSource(row["source_kind"], row["source_id"]) if row["source_kind"] else None
    return Volume(
        volume_id=row["volume_id"],
        name=row["name"],
        capacity_bytes=row["capacity_bytes"],
        capabilities=_caps_from_json(row["capabilities"]),
        fs_type=row["fs_type"],
        parameters=json.loads(row["parameters"]),
        content_source=source,
        node_id=row["node_id"],
        created_at=row["created_at"],
    )


def _publication(row: sqlite3.Row) -> Publication:
    return Publication(
        volume_id=row["volume_id"],
        node_id=row["node_id"],
        access_mode=AccessMode(row["access_mode"]),
        access_type=AccessType(row["access_type"]),
        readonly=bool(row["readonly"]),
        generation=row["generation"],
        published_at=row["published_at"],
    )


def _snapshot(row: sqlite3.Row) -> Snapshot:
    return Snapshot(
        snapshot_id=row["snapshot_id"],
        name=row["name"],
        source_volume_id=row["source_volume_id"],
        size_bytes=row["size_bytes"],
        created_at=row["created_at"],
        ready=bool(row["ready"]),
    )


def _parse_token(token: str) -> int:
    if not token:
        return 0
    if not (token.isascii() and token.isdigit()) or len(token) > 18:
        raise BadPageToken(f"starting_token {token[:40]!r} is not a token this driver issued")
    return int(token)


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            migrate(self._db, path)

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

    # ----- volumes -----
    def insert_volume_unless_named(self, volume: Volume) -> Volume | None:
        """Insert volume unless its name exists; return the existing one in that case."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM volumes WHERE name=?", (volume.name,)).fetchone()
            if row is not None:
                return _volume(row)
            db.execute(
                "INSERT INTO volumes (volume_id, name, capacity_bytes, capabilities, fs_type, "
                "parameters, source_kind, source_id, node_id, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    volume.volume_id,
                    volume.name,
                    volume.capacity_bytes,
                    _caps_to_json(volume.capabilities),
                    volume.fs_type,
                    json.dumps(dict(volume.parameters), sort_keys=True),
                    volume.content_source.kind if volume.content_source else None,
                    volume.content_source.source_id if volume.content_source else None,
                    volume.node_id,
                    volume.created_at,
                ),
            )
            return None

    def get_volume(self, volume_id: str) -> Volume | None:
        rows = self._read("SELECT * FROM volumes WHERE volume_id=?", (volume_id,))
        return _volume(rows[0]) if rows else None

    def get_volume_by_name(self, name: str) -> Volume | None:
        rows = self._read("SELECT * FROM volumes WHERE name=?", (name,))
        return _volume(rows[0]) if rows else None

    def delete_volume(self, volume_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM volumes WHERE volume_id=?", (volume_id,))

    def set_capacity(self, volume_id: str, capacity_bytes: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE volumes SET capacity_bytes=? WHERE volume_id=?", (capacity_bytes, volume_id)
            )

    def _page(
        self, table: str, filters: dict[str, str], starting_token: str, max_entries: int
    ) -> tuple[list[sqlite3.Row], str]:
        """A page in creation order. The token is the last seq served, so rows created or
        deleted between pages neither repeat nor shift the rest. table and the filter columns
        are this module's constants, never client input."""
        where = " AND ".join(["seq > ?", *(f"{column} = ?" for column in filters)])
        values = tuple(filters.values())
        limit = max_entries if max_entries > 0 else -1
        rows = self._read(
            f"SELECT * FROM {table} WHERE {where} ORDER BY seq LIMIT ?",
            (_parse_token(starting_token), *values, limit),
        )
        if not rows or max_entries <= 0 or len(rows) < max_entries:
            return rows, ""
        last = rows[-1]["seq"]
        more = self._read(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1", (last, *values))
        return rows, str(last) if more else ""

    def list_volumes_held(
        self, starting_token: str, max_entries: int
    ) -> tuple[list[tuple[Volume, list[str]]], str]:
        """A page of volumes in creation order, each with the nodes that hold it (oldest hold
        first), in one query: the page by seq, then only its volumes' publications, through
        their primary key. One row more than the page says whether another page follows."""
        limit = max_entries + 1 if max_entries > 0 else -1
        rows = self._read(
            "SELECT v.*, p.node_id AS holder FROM "
            "(SELECT * FROM volumes WHERE seq > ? ORDER BY seq LIMIT ?) v "
            "LEFT JOIN publications p ON p.volume_id = v.volume_id "
            "ORDER BY v.seq, p.published_at",
            (_parse_token(starting_token), limit),
        )
        page: list[tuple[Volume, list[str]]] = []
        seqs: list[int] = []
        for row in rows:
            if not seqs or seqs[-1] != row["seq"]:
                seqs.append(row["seq"])
                page.append((_volume(row), []))
            if row["holder"] is not None:
                page[-1][1].append(row["holder"])
        if max_entries > 0 and len(page) > max_entries:
            return page[:max_entries], str(seqs[max_entries - 1])
        return page, ""

    def all_volumes(self) -> list[Volume]:
        return [_volume(r) for r in self._read("SELECT * FROM volumes ORDER BY seq")]

    def volume_sizes(self) -> list[tuple[str, int]]:
        """(volume ID, size) of every volume: what capacity needs, without building whole rows
        (two thirds of a CreateVolume with 2,000 volumes went to all_volumes)."""
        rows = self._read("SELECT volume_id, capacity_bytes FROM volumes")
        return [(r["volume_id"], r["capacity_bytes"]) for r in rows]

    def published_volume_ids(self) -> set[str]:
        """Volumes some node holds: the ones whose files may be written or trimmed now."""
        return {r["volume_id"] for r in self._read("SELECT DISTINCT volume_id FROM publications")}

    # ----- snapshots -----
    def insert_snapshot_unless_named(self, snapshot: Snapshot) -> Snapshot | None:
        with self._tx() as db:
            row = db.execute("SELECT * FROM snapshots WHERE name=?", (snapshot.name,)).fetchone()
            if row is not None:
                return _snapshot(row)
            db.execute(
                "INSERT INTO snapshots (snapshot_id, name, source_volume_id, size_bytes, "
                "created_at, ready) VALUES (?,?,?,?,?,?)",
                (
                    snapshot.snapshot_id,
                    snapshot.name,
                    snapshot.source_volume_id,
                    snapshot.size_bytes,
                    snapshot.created_at,
                    int(snapshot.ready),
                ),
            )
            return None

    def get_snapshot_by_name(self, name: str) -> Snapshot | None:
        rows = self._read("SELECT * FROM snapshots WHERE name=?", (name,))
        return _snapshot(rows[0]) if rows else None

    def get_snapshot(self, snapshot_id: str) -> Snapshot | None:
        rows = self._read("SELECT * FROM snapshots WHERE snapshot_id=?", (snapshot_id,))
        return _snapshot(rows[0]) if rows else None

    def delete_snapshot(self, snapshot_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM snapshots WHERE snapshot_id=?", (snapshot_id,))

    def list_snapshots(
        self, starting_token: str, max_entries: int, *, snapshot_id: str = "", source: str = ""
    ) -> tuple[list[Snapshot], str]:
        filters: dict[str, str] = {}
        if snapshot_id:
            filters["snapshot_id"] = snapshot_id
        if source:
            filters["source_volume_id"] = source
        rows, next_token = self._page("snapshots", filters, starting_token, max_entries)
        return [_snapshot(r) for r in rows], next_token

    # ----- the publish ledger -----
    def publish(
        self,
        volume_id: str,
        node_id: str,
        decide: Callable[[Volume, list[Publication], int, int], ledger.PublishDecision],
        actor: str,
    ) -> ledger.PublishDecision:
        """Run decide(volume, holders, node_count_elsewhere, generation) and commit its outcome,
        all under one write lock."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM volumes WHERE volume_id=?", (volume_id,)).fetchone()
            if row is None:
                raise VolumeNotFound(f"volume {volume_id} does not exist")
            volume = _volume(row)
            holders = [
                _publication(r)
                for r in db.execute(
                    "SELECT * FROM publications WHERE volume_id=? ORDER BY published_at",
                    (volume_id,),
                )
            ]
            count = db.execute(
                "SELECT COUNT(*) FROM publications WHERE node_id=? AND volume_id != ?",
                (node_id, volume_id),
            ).fetchone()[0]
            decision = decide(volume, holders, count, row["generation"])
            if isinstance(decision, ledger.Publish):
                p = decision.publication
                db.execute(
                    "INSERT INTO publications (volume_id, node_id, access_mode, access_type, "
                    "readonly, generation, published_at) VALUES (?,?,?,?,?,?,?)",
                    (
                        p.volume_id,
                        p.node_id,
                        int(p.access_mode),
                        p.access_type.value,
                        int(p.readonly),
                        p.generation,
                        p.published_at,
                    ),
                )
                db.execute(
                    "UPDATE volumes SET generation=? WHERE volume_id=?", (p.generation, volume_id)
                )
                self._audit(db, actor, "publish", p.volume_id, p.node_id, p.generation, "")
            return decision

    def unpublish(
        self,
        volume_id: str,
        node_id: str,
        actor: str,
        action: str = "unpublish",
        reason: str = "",
        classify: Callable[[Publication], tuple[str, str]] | None = None,
    ) -> list[Publication]:
        """Remove the rows for node_id ("" = every node); return what was removed. classify(row)
        names each row's audit (action, reason), where one call may revoke some rows."""
        with self._tx() as db:
            if node_id:
                rows = db.execute(
                    "SELECT * FROM publications WHERE volume_id=? AND node_id=?",
                    (volume_id, node_id),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT * FROM publications WHERE volume_id=?", (volume_id,)
                ).fetchall()
            removed = [_publication(r) for r in rows]
            for p in removed:
                db.execute(
                    "DELETE FROM publications WHERE volume_id=? AND node_id=?",
                    (p.volume_id, p.node_id),
                )
                what, why = classify(p) if classify else (action, reason)
                self._audit(db, actor, what, p.volume_id, p.node_id, p.generation, why)
            return removed

    def force_detach(
        self,
        volume_id: str,
        node_id: str,
        check: Callable[[Publication], None],
        actor: str,
        reason: str,
    ) -> Publication | None:
        """Remove node_id's row after check(row) allows it; the audit row records the revoked
        generation. Returns None when the node held nothing (idempotent)."""
        with self._tx() as db:
            row = db.execute(
                "SELECT * FROM publications WHERE volume_id=? AND node_id=?", (volume_id, node_id)
            ).fetchone()
            if row is None:
                return None
            p = _publication(row)
            check(p)
            db.execute(
                "DELETE FROM publications WHERE volume_id=? AND node_id=?", (volume_id, node_id)
            )
            self._audit(db, actor, "force-detach", volume_id, node_id, p.generation, reason)
            return p

    def publications(self, volume_id: str = "", node_id: str = "") -> list[Publication]:
        sql, args = "SELECT * FROM publications", []
        conds = []
        if volume_id:
            conds.append("volume_id=?")
            args.append(volume_id)
        if node_id:
            conds.append("node_id=?")
            args.append(node_id)
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        return [
            _publication(r)
            for r in self._read(sql + " ORDER BY volume_id, published_at", tuple(args))
        ]

    def lease(self, volume_id: str) -> tuple[int, dict[str, int]]:
        """(the volume's newest generation, node -> generation held), in one read."""
        rows = self._read(
            "SELECT v.generation AS newest, p.node_id, p.generation FROM volumes v "
            "LEFT JOIN publications p ON p.volume_id = v.volume_id WHERE v.volume_id=?",
            (volume_id,),
        )
        if not rows:
            return 0, {}
        holders = {r["node_id"]: int(r["generation"]) for r in rows if r["node_id"] is not None}
        return int(rows[0]["newest"]), holders

    def generation(self, volume_id: str) -> int:
        rows = self._read("SELECT generation FROM volumes WHERE volume_id=?", (volume_id,))
        return int(rows[0]["generation"]) if rows else 0

    def record(
        self,
        actor: str,
        action: str,
        volume_id: str,
        node_id: str,
        generation: int,
        reason: str,
        event_id: str | None = None,
    ) -> None:
        """One audit row. With an event_id, idempotent: a second record of the same event (the
        node's own row, then the import of its report; or a retried import) adds nothing."""
        with self._tx() as db:
            self._audit(db, actor, action, volume_id, node_id, generation, reason, event_id)

    @staticmethod
    def _audit(
        db: sqlite3.Connection,
        actor: str,
        action: str,
        volume_id: str,
        node_id: str,
        generation: int,
        reason: str,
        event_id: str | None = None,
    ) -> None:
        db.execute(
            "INSERT INTO audit (at, actor, action, volume_id, node_id, generation, reason, "
            "event_id) VALUES (?,?,?,?,?,?,?,?) "
            "ON CONFLICT (event_id) WHERE event_id IS NOT NULL DO NOTHING",
            (time.time(), actor, action, volume_id, node_id, generation, reason, event_id),
        )

    def audit_counts(self) -> dict[str, int]:
        rows = self._read("SELECT action, COUNT(*) AS n FROM audit GROUP BY action")
        return {r["action"]: int(r["n"]) for r in rows}

    def audit(self, volume_id: str = "") -> list[AuditEntry]:
        sql = "SELECT * FROM audit" + (" WHERE volume_id=?" if volume_id else "") + " ORDER BY seq"
        return [
            AuditEntry(
                r["seq"],
                r["at"],
                r["actor"],
                r["action"],
                r["volume_id"],
                r["node_id"],
                r["generation"],
                r["reason"],
            )
            for r in self._read(sql, (volume_id,) if volume_id else ())
        ]

    # ----- a node's own records -----
    def save_staging(self, s: NodeStaging) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO node_staged (volume_id, staging_path, access_type, "
                "access_mode, fs_type, device, generation, staged_at, readonly) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    s.volume_id,
                    s.staging_path,
                    s.access_type.value,
                    int(s.access_mode),
                    s.fs_type,
                    s.device,
                    s.generation,
                    s.staged_at,
                    int(s.readonly),
                ),
            )

    def get_staging(self, volume_id: str) -> NodeStaging | None:
        rows = self._read("SELECT * FROM node_staged WHERE volume_id=?", (volume_id,))
        return _staging(rows[0]) if rows else None

    def stagings_on_device(self, device: str) -> list[NodeStaging]:
        rows = self._read("SELECT * FROM node_staged WHERE device=?", (device,))
        return [_staging(r) for r in rows]

    def stagings(self) -> list[NodeStaging]:
        return [_staging(r) for r in self._read("SELECT * FROM node_staged ORDER BY staged_at")]

    def delete_staging(self, volume_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM node_staged WHERE volume_id=?", (volume_id,))

    def save_node_publication(self, p: NodePublication) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO node_published (target_path, volume_id, readonly, "
                "access_mode, access_type, mount_flags) VALUES (?,?,?,?,?,?)",
                (
                    p.target_path,
                    p.volume_id,
                    int(p.readonly),
                    int(p.access_mode),
                    p.access_type.value,
                    json.dumps(list(p.mount_flags)),
                ),
            )

    def get_node_publication(self, target_path: str) -> NodePublication | None:
        rows = self._read("SELECT * FROM node_published WHERE target_path=?", (target_path,))
        return _node_publication(rows[0]) if rows else None

    def node_publications(self, volume_id: str = "") -> list[NodePublication]:
        if volume_id:
            rows = self._read("SELECT * FROM node_published WHERE volume_id=?", (volume_id,))
        else:
            rows = self._read("SELECT * FROM node_published")
        return [_node_publication(r) for r in rows]

    def delete_node_publication(self, target_path: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM node_published WHERE target_path=?", (target_path,))


def _staging(row: sqlite3.Row) -> NodeStaging:
    return NodeStaging(
        volume_id=row["volume_id"],
        staging_path=row["staging_path"],
        access_type=AccessType(row["access_type"]),
        access_mode=AccessMode(row["access_mode"]),
        fs_type=row["fs_type"],
        device=row["device"],
        generation=row["generation"],
        staged_at=row["staged_at"],
        readonly=bool(row["readonly"]),
    )


def _node_publication(row: sqlite3.Row) -> NodePublication:
    return NodePublication(
        volume_id=row["volume_id"],
        target_path=row["target_path"],
        readonly=bool(row["readonly"]),
        access_mode=AccessMode(row["access_mode"]),
        access_type=AccessType(row["access_type"]),
        mount_flags=tuple(json.loads(row["mount_flags"])),
    )
