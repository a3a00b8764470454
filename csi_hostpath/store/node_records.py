"""A node plugin's own records: what it staged (node_staged) and published (node_published)."""

from __future__ import annotations

import json

from csi_hostpath.core.model import NodePublication, NodeStaging
from csi_hostpath.store.connection import Connection
from csi_hostpath.store.rows import node_publication_of, staging_of


class NodeRecords(Connection):
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
        return staging_of(rows[0]) if rows else None

    def stagings_on_device(self, device: str) -> list[NodeStaging]:
        rows = self._read("SELECT * FROM node_staged WHERE device=?", (device,))
        return [staging_of(r) for r in rows]

    def stagings(self) -> list[NodeStaging]:
        return [staging_of(r) for r in self._read("SELECT * FROM node_staged ORDER BY staged_at")]

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
        return node_publication_of(rows[0]) if rows else None

    def node_publications(self, volume_id: str = "") -> list[NodePublication]:
        if volume_id:
            rows = self._read("SELECT * FROM node_published WHERE volume_id=?", (volume_id,))
        else:
            rows = self._read("SELECT * FROM node_published")
        return [node_publication_of(r) for r in rows]

    def delete_node_publication(self, target_path: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM node_published WHERE target_path=?", (target_path,))
