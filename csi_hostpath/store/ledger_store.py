"""The publish ledger and the audit trail: a row per (volume, node) holding it, each publish
decided and committed under one write lock, and one audit row per change."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from csi_hostpath.core import ledger_rules
from csi_hostpath.core.errors import VolumeNotFound
from csi_hostpath.core.model import Publication, Volume
from csi_hostpath.store.connection import Connection
from csi_hostpath.store.rows import AuditEntry, publication_of, volume_of


@dataclass(frozen=True, slots=True)
class GenerationFloor:
    """What a rebuild from the pool restores of a volume's ledger: the highest generation already
    issued (the next publish goes above it), and the holders a newer lease lists that the
    database lost."""

    generation: int
    restored: tuple[Publication, ...] = ()


class Ledger(Connection):
    def publish_atomically(
        self,
        volume_id: str,
        node_id: str,
        decide: Callable[[Volume, list[Publication], int, int], ledger_rules.PublishDecision],
        actor: str,
    ) -> ledger_rules.PublishDecision:
        """Run decide(volume, holders, node_count_elsewhere, generation) and commit its outcome,
        all under one write lock."""
        with self._tx() as db:
            row = db.execute("SELECT * FROM volumes WHERE volume_id=?", (volume_id,)).fetchone()
            if row is None:
                raise VolumeNotFound(f"volume {volume_id} does not exist")
            volume = volume_of(row)
            holders = [
                publication_of(r)
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
            if isinstance(decision, ledger_rules.Publish):
                p = decision.publication
                _insert_publication(db, p, "INSERT")
                db.execute(
                    "UPDATE volumes SET generation=? WHERE volume_id=?", (p.generation, volume_id)
                )
                self.record(actor, "publish", p.volume_id, p.node_id, p.generation, "", within=db)
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
            removed = [publication_of(r) for r in rows]
            for p in removed:
                db.execute(
                    "DELETE FROM publications WHERE volume_id=? AND node_id=?",
                    (p.volume_id, p.node_id),
                )
                what, why = classify(p) if classify else (action, reason)
                self.record(actor, what, p.volume_id, p.node_id, p.generation, why, within=db)
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
            p = publication_of(row)
            check(p)
            db.execute(
                "DELETE FROM publications WHERE volume_id=? AND node_id=?", (volume_id, node_id)
            )
            self.record(actor, "force-detach", volume_id, node_id, p.generation, reason, within=db)
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
            publication_of(r)
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
        *,
        within: sqlite3.Connection | None = None,
    ) -> None:
        """One audit row, in the caller's transaction (within) or in one of its own. With an
        event_id, idempotent: a second record of the same event (the node's own row, then the
        import of its report; or a retried import) adds nothing."""
        sql = (
            "INSERT INTO audit (at, actor, action, volume_id, node_id, generation, reason, "
            "event_id) VALUES (?,?,?,?,?,?,?,?) "
            "ON CONFLICT (event_id) WHERE event_id IS NOT NULL DO NOTHING"
        )
        row = (time.time(), actor, action, volume_id, node_id, generation, reason, event_id)
        if within is not None:
            within.execute(sql, row)
            return
        with self._tx() as db:
            db.execute(sql, row)

    def audit_counts(self) -> dict[str, int]:
        rows = self._read("SELECT action, COUNT(*) AS n FROM audit GROUP BY action")
        return {r["action"]: int(r["n"]) for r in rows}

    def audit_event_ids(self) -> set[str]:
        rows = self._read("SELECT event_id FROM audit WHERE event_id IS NOT NULL")
        return {str(r["event_id"]) for r in rows}

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

    def keep_generations_ahead(
        self, volume_id: str, plan: Callable[[int, set[str]], GenerationFloor]
    ) -> bool:
        """Run plan(the volume's generation, the nodes holding it) and commit it under one write
        lock: restore the holders it lists, raise the generation to its floor, audit both.
        Returns whether anything changed (False too when the volume has no row)."""
        with self._tx() as db:
            row = db.execute(
                "SELECT generation FROM volumes WHERE volume_id=?", (volume_id,)
            ).fetchone()
            if row is None:
                return False
            current = int(row["generation"])
            held = {
                r["node_id"]
                for r in db.execute(
                    "SELECT node_id FROM publications WHERE volume_id=?", (volume_id,)
                )
            }
            floor = plan(current, held)
            for p in floor.restored:
                _insert_publication(db, p, "INSERT OR IGNORE")
                self.record(
                    "pool", "restore-holder", volume_id, p.node_id, p.generation, "", within=db
                )
            if floor.generation > current:
                db.execute(
                    "UPDATE volumes SET generation=? WHERE volume_id=?",
                    (floor.generation, volume_id),
                )
                reason = (
                    f"raised from {current}: generations up to {floor.generation} were already "
                    "issued"
                )
                self.record(
                    "pool", "generation-floor", volume_id, "", floor.generation, reason, within=db
                )
            return bool(floor.restored) or floor.generation > current


def _insert_publication(db: sqlite3.Connection, p: Publication, verb: str) -> None:
    """One ledger row; verb is "INSERT" or "INSERT OR IGNORE", never client input."""
    db.execute(
        f"{verb} INTO publications (volume_id, node_id, access_mode, access_type, readonly, "
        "generation, published_at) VALUES (?,?,?,?,?,?,?)",
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
