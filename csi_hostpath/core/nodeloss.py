"""When a node is lost, and so are the volumes whose data lives only on it.

A local pool's volumes live on one node. That node is *lost* when an operator says so
(`csi-hostpath node forget N --reason ...`, an audit row), or when its node plugin has been silent
past a threshold (`--node-lost-after`). Lost is a label for operators (inspect, doctor, the
csi_hostpath_lost_volumes metric) and one relaxation: DeleteVolume of a lost volume succeeds even
though the lost node still holds it, and says so in the audit trail. Nothing is deleted because a
node is lost; only a DeleteVolume deletes. A shared pool's volumes have no home node, so they are
never lost with a node (a dead node's holds there are force-detach's business).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FORGET_ACTION = "node-forget"
DELETE_LOST_ACTION = "delete-lost"
# A node plugin beats every few seconds; a quarter of an hour of silence is not a restart.
DEFAULT_LOST_AFTER = 900.0


@dataclass(frozen=True, slots=True)
class Loss:
    node_id: str
    why: str


def node_loss(
    node_id: str,
    heartbeat_age: float | None,
    forgotten: Mapping[str, str],
    lost_after: float,
) -> Loss | None:
    """Whether node_id is lost, and why. A node never heard of (no heartbeat) is not lost by
    silence: its plugin may not have started yet."""
    if node_id in forgotten:
        return Loss(node_id, f"forgotten by an operator: {forgotten[node_id]}")
    if heartbeat_age is not None and heartbeat_age > lost_after:
        return Loss(
            node_id,
            f"its node plugin has been silent for {heartbeat_age:.0f} s "
            f"(lost after {lost_after:.0f} s)",
        )
    return None
