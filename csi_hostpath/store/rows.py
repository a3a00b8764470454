"""sqlite rows to the core's model and back: one converter per table, shared by every part of
the store."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from csi_hostpath.core.errors import BadPageToken
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


def caps_to_json(caps: tuple[Capability, ...]) -> str:
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


def caps_from_json(text: str) -> tuple[Capability, ...]:
    return tuple(
        Capability(AccessType(c["type"]), AccessMode(c["mode"]), c["fs"], tuple(c["flags"]))
        for c in json.loads(text)
    )


def volume_of(row: sqlite3.Row) -> Volume:
    source = ContentSource(row["source_kind"], row["source_id"]) if row["source_kind"] else None
    return Volume(
        volume_id=row["volume_id"],
        name=row["name"],
        capacity_bytes=row["capacity_bytes"],
        capabilities=caps_from_json(row["capabilities"]),
        fs_type=row["fs_type"],
        parameters=json.loads(row["parameters"]),
        content_source=source,
        node_id=row["node_id"],
        created_at=row["created_at"],
        requested_bytes=row["requested_bytes"],
    )


def publication_of(row: sqlite3.Row) -> Publication:
    return Publication(
        volume_id=row["volume_id"],
        node_id=row["node_id"],
        access_mode=AccessMode(row["access_mode"]),
        access_type=AccessType(row["access_type"]),
        readonly=bool(row["readonly"]),
        generation=row["generation"],
        published_at=row["published_at"],
    )


def snapshot_of(row: sqlite3.Row) -> Snapshot:
    return Snapshot(
        snapshot_id=row["snapshot_id"],
        name=row["name"],
        source_volume_id=row["source_volume_id"],
        size_bytes=row["size_bytes"],
        created_at=row["created_at"],
        ready=bool(row["ready"]),
        restore_bytes=row["restore_bytes"],
    )


def parse_token(token: str) -> int:
    if not token:
        return 0
    if not (token.isascii() and token.isdigit()) or len(token) > 18:
        raise BadPageToken(f"starting_token {token[:40]!r} is not a token this driver issued")
    return int(token)


def staging_of(row: sqlite3.Row) -> NodeStaging:
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


def node_publication_of(row: sqlite3.Row) -> NodePublication:
    return NodePublication(
        volume_id=row["volume_id"],
        target_path=row["target_path"],
        readonly=bool(row["readonly"]),
        access_mode=AccessMode(row["access_mode"]),
        access_type=AccessType(row["access_type"]),
        mount_flags=tuple(json.loads(row["mount_flags"])),
    )
