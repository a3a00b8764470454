"""What the driver knows of one volume, for a reader outside it (`kubectl csi-hostpath why`):
the ledger's holders with their nodes' heartbeat ages, what each node reports staged, and the
volume's recent audit rows (publishes, revocations, force-detaches, fences).

Read only: it reads the store and the pool and writes nothing, not even the import of the
nodes' fence events (the controller's own loop imports those every heartbeat interval). The
document is versioned (SCHEMA); docs/operations.md describes it.
"""

from __future__ import annotations

import time
from typing import Any

from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout

SCHEMA = "csi-hostpath.ledger-view/v1"
# The newest rows only: a volume moved every day for a year has hundreds, and a reader asks why
# it is stuck now.
AUDIT_ROWS = 20
# What a node reports of a staged volume that a reader may show (its heartbeat entry).
STAGING_FIELDS = (
    "staging",
    "device",
    "access_mode",
    "fs_type",
    "readonly",
    "generation",
    "staged_at",
    "targets",
    "busy",
    "unclaimed",
    "abnormal",
)


def ledger_view(
    store: Store, layout: PoolLayout, volume_id: str, node_grace: float, now: float | None = None
) -> dict[str, Any]:
    now = time.time() if now is None else now
    view: dict[str, Any] = {
        "schema": SCHEMA,
        "volume_id": volume_id,
        "known": False,
        "now": now,
        "node_grace_seconds": node_grace,
    }
    volume = store.get_volume(volume_id) if is_volume_id(volume_id) else None
    if volume is None:
        return view
    beats = {b.node_id: b for b in layout.heartbeats(volume_id)}
    holders = []
    for p in store.publications(volume_id=volume_id):
        beat = beats.get(p.node_id)
        age = beat.age(now) if beat is not None else None
        holders.append(
            {
                "node": p.node_id,
                "access_mode": p.access_mode.name,
                "readonly": p.readonly,
                "generation": p.generation,
                "since": p.published_at,
                "heartbeat_age_seconds": age,
                "silent": age is None or age >= node_grace,
            }
        )
    stagings = [
        {"node": node, **{k: entry[k] for k in STAGING_FIELDS if k in entry}}
        for node, beat in sorted(beats.items())
        for entry in [beat.volumes.get(volume_id)]
        if entry is not None
    ]
    audit = [
        {
            "at": e.at,
            "actor": e.actor,
            "action": e.action,
            "node": e.node_id,
            "generation": e.generation,
            "reason": e.reason,
        }
        for e in store.audit(volume_id)[-AUDIT_ROWS:]
    ]
    view.update(
        known=True,
        name=volume.name,
        capacity_bytes=volume.capacity_bytes,
        generation=store.generation(volume_id),
        holders=holders,
        stagings=stagings,
        audit=audit,
    )
    return view
