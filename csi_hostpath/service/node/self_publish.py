"""The node's own publication of a volume when the CO does no attach (the chart's local shape).

With CSIDriver attachRequired: false, Kubernetes never calls ControllerPublishVolume, but NodeStage
still needs the fencing generation a publish grants (service/node/stage_checks.py,
`granted_generation`).
In local scope with the controller service in the same process (--mode all --self-publish), the
node's stage use-case asks the controller's ledger for that publication before it stages, and
gives it back after it unstages. The ledger and the leases stay the one record of who holds
what, and the audit names every publication. See docs/design.md, "The local shape".

The ledger comes through a narrow Protocol (publish and unpublish only): no service package
imports another, and the node needs nothing else of the controller's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from csi_hostpath.core.context_keys import GENERATION_KEY
from csi_hostpath.core.model import Capability
from csi_hostpath.service.node._log import log


class Ledger(Protocol):
    """The publish ledger, as the node's stage sees it (the controller's PublishLedger)."""

    def publish(
        self, volume_id: str, node_id: str, cap: Capability, readonly: bool
    ) -> dict[str, str]: ...

    def unpublish(self, volume_id: str, node_id: str) -> None: ...


class Stages(Protocol):
    """A node's stage and unstage (NodeService)."""

    def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: Capability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
    ) -> None: ...

    def unstage(self, volume_id: str, staging_path: str) -> None: ...


class SelfPublish:
    """NodeStage and NodeUnstage where the node publishes to itself: a Stages, in NodeService's
    place."""

    def __init__(self, node: Stages, ledger: Ledger, node_id: str) -> None:
        self.node = node
        self.ledger = ledger
        self.node_id = node_id

    def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: Capability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
    ) -> None:
        """Staged with the CO's publish_context when it carries a generation (an attach did
        happen), else with the one this node's own publish grants. A repeat is idempotent, as
        ControllerPublishVolume is."""
        if GENERATION_KEY not in publish_context:
            granted = self.ledger.publish(volume_id, self.node_id, cap, False)
            log.info("self-publish: published %s to node %s for NodeStage", volume_id, self.node_id)
            publish_context = {**publish_context, **granted}
        self.node.stage(volume_id, staging_path, cap, publish_context, volume_context)

    def unstage(self, volume_id: str, staging_path: str) -> None:
        """Unstaged, then the publication given back, so the volume can be deleted."""
        self.node.unstage(volume_id, staging_path)
        self.ledger.unpublish(volume_id, self.node_id)
        log.info("self-publish: unpublished %s from node %s", volume_id, self.node_id)
