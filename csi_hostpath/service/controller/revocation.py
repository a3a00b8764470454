"""Which rows a ControllerUnpublishVolume revokes rather than merely removes.

Kubernetes' own force-detach (the attach-detach controller after maxWaitForUnmountDuration on an
unhealthy node, or at once under the node.kubernetes.io/out-of-service taint) is a plain
ControllerUnpublishVolume with no NodeUnstage before it. The node's heartbeat tells the two apart:
core.ledger_rules.classify_unpublish decides, this gathers what it decides on."""

from __future__ import annotations

import time

from csi_hostpath.core import ledger_rules
from csi_hostpath.core.model import Publication
from csi_hostpath.store.pool_layout import Heartbeat


class Revocations:
    """A classifier for store.unpublish; afterwards, revoked maps node ID -> the reason."""

    def __init__(self, beats: list[Heartbeat], volume_id: str, node_grace: float) -> None:
        self.beats = {b.node_id: b for b in beats}
        self.volume_id = volume_id
        self.node_grace = node_grace
        self.now = time.time()
        self.revoked: dict[str, str] = {}

    def __call__(self, p: Publication) -> tuple[str, str]:
        beat = self.beats.get(p.node_id)
        action, reason = ledger_rules.classify_unpublish(
            p,
            beat.age(self.now) if beat else None,
            beat is not None and self.volume_id in beat.volumes,
            self.node_grace,
        )
        if action == ledger_rules.FORCED_UNPUBLISH:
            self.revoked[p.node_id] = reason
        return action, reason
