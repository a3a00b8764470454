"""doctor: volumes whose node is lost (core/nodeloss.py), one finding per lost node."""

from __future__ import annotations

import shlex
from pathlib import Path

from csi_hostpath.doctor.finding import Finding
from csi_hostpath.service.lost_volumes import lost_volumes
from csi_hostpath.store.db import (
    StateDenied,
    StateOutdated,
    StateUnreadable,
    open_read_only,
)
from csi_hostpath.store.pool_layout import PoolLayout


def check_lost(state_dir: Path, pool_dir: Path, lost_after: float) -> list[Finding]:
    db = state_dir / "state.db"
    if not db.exists():
        return []  # the state-dir check already says there is no state
    try:
        store = open_read_only(db)
    except (StateDenied, StateOutdated, StateUnreadable):
        return []  # the state-dir check says why it can't be read
    try:
        lost = lost_volumes(store, PoolLayout(pool_dir), lost_after)
    finally:
        store.close()
    if not lost:
        return [Finding("lost-volumes", "ok", "no volume's node is lost")]
    by_node: dict[str, list[str]] = {}
    why: dict[str, str] = {}
    for volume, loss in lost:
        by_node.setdefault(loss.node_id, []).append(volume.volume_id)
        why[loss.node_id] = loss.why
    return [
        Finding(
            "lost-volumes",
            "warn",
            f"{len(ids)} volume(s) live on node {node!r}, which is lost ({why[node]}): "
            + ", ".join(ids),
            "their data was on that node only. Delete them (DeleteVolume succeeds; deleting the "
            "claims does it), then make the claims provisionable again: csi-hostpath node "
            f"cleanup {shlex.quote(node)}",
        )
        for node, ids in sorted(by_node.items())
    ]
