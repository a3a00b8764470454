"""The checks a stage makes against the ledger and against other nodes: the fencing token the CO
hands over must be one the lease grants this node, and no other node may still hold the volume
staged (its heartbeat says so) until it lets go or falls silent."""

from __future__ import annotations

import re
from collections.abc import Mapping

from csi_hostpath.core import ledger_rules
from csi_hostpath.core.context_keys import GENERATION_KEY
from csi_hostpath.core.errors import Busy, GenerationRevoked
from csi_hostpath.service.node.node_context import NodeContext

_GENERATION = re.compile(r"[0-9]{1,18}")


class StageChecks:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx  # its flag: node_grace
        self.node_id = ctx.node_id
        self.layout = ctx.layout

    def granted_generation(self, volume_id: str, publish_context: Mapping[str, str]) -> int:
        """Check the fencing token the CO hands us against the lease the controller wrote."""
        raw = publish_context.get(GENERATION_KEY, "")
        if not _GENERATION.fullmatch(raw):
            raise GenerationRevoked(
                f"volume {volume_id} is not published to node {self.node_id!r}: the "
                "publish_context carries no fencing generation; call ControllerPublishVolume first"
            )
        generation = int(raw)
        lease = self.layout.read_lease(volume_id)
        if not ledger_rules.grants(lease, self.node_id, generation):
            held = lease.holders if lease else {}
            raise GenerationRevoked(
                f"volume {volume_id}: generation {generation} is not held by node "
                f"{self.node_id!r} (the ledger's holders are {held or 'none'}); it was "
                "unpublished or force-detached, so this node must not touch the volume"
            )
        return generation

    def check_no_other_live_stager(self, volume_id: str) -> None:
        """The ledger moved the volume here, but the node it came from may still be alive and
        mounted: Kubernetes unpublishes a node it can't reach after a timeout, and a forced
        detach can be taken against a live node. Until that node reports the volume gone (it
        fences itself within its fence interval) or falls silent past the grace period, staging
        here would put two writers on one filesystem."""
        for beat in self.layout.heartbeats(volume_id):
            if beat.node_id == self.node_id or volume_id not in beat.volumes:
                continue
            age = beat.age()
            if age < self.ctx.node_grace:
                raise Busy(
                    f"volume {volume_id} is still staged on node {beat.node_id!r} (its heartbeat "
                    f"{age:.0f}s ago says so); it unstages or fences itself first, or goes silent "
                    f"for {self.ctx.node_grace:.0f}s. Retrying is safe"
                )
