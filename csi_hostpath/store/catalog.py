"""The controller's catalog: volumes and snapshots, each looked up by ID or name and listed in
pages."""

from __future__ import annotations

import json
import sqlite3

from csi_hostpath.core.model import Snapshot, Volume
from csi_hostpath.store.connection import Connection
from csi_hostpath.store.rows import caps_to_json, parse_token, snapshot_of, volume_of


class Catalog(Connection):
    def insert_volume_unless_named(self, volume: Volume) -> Volume | None:
        """Insert volume unless its name exists; return the existing one in that case."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM volumes WHERE name=?", (volume.name,)).fetchone()
            if row is not None:
                return volume_of(row)
            db.execute(
                "INSERT INTO volumes (volume_id, name, capacity_bytes, capabilities, fs_type, "
                "parameters, source_kind, source_id, node_id, created_at, requested_bytes) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    volume.volume_id,
                    volume.name,
                    volume.capacity_bytes,
                    caps_to_json(volume.capabilities),
                    volume.fs_type,
                    json.dumps(dict(volume.parameters), sort_keys=True),
                    volume.content_source.kind if volume.content_source else None,
                    volume.content_source.source_id if volume.content_source else None,
                    volume.node_id,
                    volume.created_at,
                    volume.requested_bytes,
                ),
            )
            return None

    def get_volume(self, volume_id: str) -> Volume | None:
        rows = self._read("SELECT * FROM volumes WHERE volume_id=?", (volume_id,))
        return volume_of(rows[0]) if rows else None

    def get_volume_by_name(self, name: str) -> Volume | None:
        rows = self._read("SELECT * FROM volumes WHERE name=?", (name,))
        return volume_of(rows[0]) if rows else None

    def delete_volume(self, volume_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM volumes WHERE volume_id=?", (volume_id,))

    def set_capacity(
        self, volume_id: str, capacity_bytes: int, requested_bytes: int | None = None
    ) -> None:
        """The volume's new size, and the request that grew it to that (None: kept)."""
        with self._tx() as db:
            db.execute(
                "UPDATE volumes SET capacity_bytes=?, "
                "requested_bytes=COALESCE(?, requested_bytes) WHERE volume_id=?",
                (capacity_bytes, requested_bytes, volume_id),
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
            (parse_token(starting_token), *values, limit),
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
            (parse_token(starting_token), limit),
        )
        page: list[tuple[Volume, list[str]]] = []
        seqs: list[int] = []
        for row in rows:
            if not seqs or seqs[-1] != row["seq"]:
                seqs.append(row["seq"])
                page.append((volume_of(row), []))
            if row["holder"] is not None:
                page[-1][1].append(row["holder"])
        if max_entries > 0 and len(page) > max_entries:
            return page[:max_entries], str(seqs[max_entries - 1])
        return page, ""

    def all_volumes(self) -> list[Volume]:
        return [volume_of(r) for r in self._read("SELECT * FROM volumes ORDER BY seq")]

    def volume_sizes(self) -> list[tuple[str, int]]:
        """(volume ID, size) of every volume: what capacity needs, without building whole rows
        (two thirds of a CreateVolume with 2,000 volumes went to all_volumes)."""
        rows = self._read("SELECT volume_id, capacity_bytes FROM volumes")
        return [(r["volume_id"], r["capacity_bytes"]) for r in rows]

    def volume_size(self, volume_id: str) -> int | None:
        """One volume's size, None once its row is gone."""
        rows = self._read("SELECT capacity_bytes FROM volumes WHERE volume_id=?", (volume_id,))
        return int(rows[0]["capacity_bytes"]) if rows else None

    def promised_bytes(self) -> int:
        """The sum of every volume's size, kept in the same transaction as each row's change
        (store/migrations.py, volume_totals): one row read, whatever the number of volumes."""
        return int(self._read("SELECT capacity_bytes FROM volume_totals WHERE id=0")[0][0])

    def published_volume_ids(self) -> set[str]:
        """Volumes some node holds: the ones whose files may be written or trimmed now."""
        return {r["volume_id"] for r in self._read("SELECT DISTINCT volume_id FROM publications")}

    # ----- snapshots -----
    def insert_snapshot_unless_named(self, snapshot: Snapshot) -> Snapshot | None:
        with self._tx() as db:
            row = db.execute("SELECT * FROM snapshots WHERE name=?", (snapshot.name,)).fetchone()
            if row is not None:
                return snapshot_of(row)
            db.execute(
                "INSERT INTO snapshots (snapshot_id, name, source_volume_id, size_bytes, "
                "created_at, ready, restore_bytes) VALUES (?,?,?,?,?,?,?)",
                (
                    snapshot.snapshot_id,
                    snapshot.name,
                    snapshot.source_volume_id,
                    snapshot.size_bytes,
                    snapshot.created_at,
                    int(snapshot.ready),
                    snapshot.restore_bytes,
                ),
            )
            return None

    def get_snapshot_by_name(self, name: str) -> Snapshot | None:
        rows = self._read("SELECT * FROM snapshots WHERE name=?", (name,))
        return snapshot_of(rows[0]) if rows else None

    def get_snapshot(self, snapshot_id: str) -> Snapshot | None:
        rows = self._read("SELECT * FROM snapshots WHERE snapshot_id=?", (snapshot_id,))
        return snapshot_of(rows[0]) if rows else None

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
        return [snapshot_of(r) for r in rows], next_token
