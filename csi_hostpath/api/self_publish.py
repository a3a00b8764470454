"""The node's own publication of a volume when the CO does no attach (the chart's local shape).

With CSIDriver attachRequired: false, Kubernetes never calls ControllerPublishVolume, but NodeStage
still needs the fencing generation a publish grants (service/node/stage_checks.py,
`granted_generation`).
In local scope with the controller service in the same process (--mode all --self-publish), the
node asks its own controller for that publication at NodeStage and unpublishes at NodeUnstage.
The ledger and the leases stay the one record of who holds what, and the audit names every
publication. See docs/design.md, "The local shape"."""

from __future__ import annotations

from collections.abc import Mapping

from csi_hostpath.api._log import log
from csi_hostpath.core.context_keys import GENERATION_KEY
from csi_hostpath.core.model import Capability
from csi_hostpath.service.controller.publish_ledger import PublishLedger


class SelfPublish:
    def __init__(self, ledger: PublishLedger, node_id: str) -> None:
        self.ledger = ledger
        self.node_id = node_id

    def publish(
        self, volume_id: str, cap: Capability, publish_context: Mapping[str, str]
    ) -> dict[str, str]:
        """The publish_context NodeStage runs with: the CO's, when it carries a generation (an
        attach did happen), or the one this node's own publish grants. A repeat is idempotent,
        as ControllerPublishVolume is."""
        if GENERATION_KEY in publish_context:
            return dict(publish_context)
        granted = self.ledger.publish(volume_id, self.node_id, cap, False)
        log.info("self-publish: published %s to node %s for NodeStage", volume_id, self.node_id)
        return {**publish_context, **granted}

    def unpublish(self, volume_id: str) -> None:
        """After NodeUnstage: the publication given back, so the volume can be deleted."""
        self.ledger.unpublish(volume_id, self.node_id)
        log.info("self-publish: unpublished %s from node %s", volume_id, self.node_id)
