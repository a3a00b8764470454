"""Which nodes, and so which local volumes, are lost: read from the audit trail (forgets) and
the pool's heartbeats, decided by core/nodeloss.py."""

from __future__ import annotations

import time

from csi_hostpath.core.model import Volume
from csi_hostpath.core.nodeloss import DELETE_LOST_ACTION, FORGET_ACTION, Loss, node_loss
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout


def forgotten_nodes(store: Store) -> dict[str, str]:
    """Node -> the reason an operator gave for forgetting it (the newest forget wins)."""
    return {a.node_id: a.reason for a in store.audit() if a.action == FORGET_ACTION}


def forget_node(store: Store, node_id: str, reason: str, actor: str) -> None:
    store.record(actor, FORGET_ACTION, "", node_id, 0, reason)


def loss_of(
    volume: Volume,
    store: Store,
    layout: PoolLayout,
    lost_after: float,
    forgotten: dict[str, str] | None = None,
) -> Loss | None:
    if not volume.node_id:
        return None
    beat = layout.heartbeat(volume.node_id)
    return node_loss(
        volume.node_id,
        beat.age(time.time()) if beat else None,
        forgotten_nodes(store) if forgotten is None else forgotten,
        lost_after,
    )


def lost_volumes(store: Store, layout: PoolLayout, lost_after: float) -> list[tuple[Volume, Loss]]:
    forgotten = forgotten_nodes(store)
    found = []
    for volume in store.all_volumes():
        loss = loss_of(volume, store, layout, lost_after, forgotten)
        if loss is not None:
            found.append((volume, loss))
    return found


def release_lost(store: Store, volume: Volume, loss: Loss) -> None:
    """Before a lost volume is deleted: revoke the holds its lost node can no longer give back,
    and record the deletion's cause. Each revoked hold is audited too."""
    why = f"node {loss.node_id!r} is lost ({loss.why})"
    store.unpublish(volume.volume_id, "", "controller", action=DELETE_LOST_ACTION, reason=why)
    store.record("controller", DELETE_LOST_ACTION, volume.volume_id, loss.node_id, 0, why)
