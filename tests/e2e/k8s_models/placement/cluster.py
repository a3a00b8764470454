"""The control loop that ties the models together: the scheduler places a pending pod (and so
its claim), then the provisioner of the selected node provisions it, until nothing changes."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.e2e.k8s_models.objects import Api, Claim
from tests.e2e.k8s_models.placement.provisioner import NodeProvisioner
from tests.e2e.k8s_models.placement.scheduler import schedule


@dataclass
class ManyMachines:
    api: Api
    provisioners: dict[str, NodeProvisioner] = field(default_factory=dict)

    def refresh_capacity(self) -> None:
        for p in self.provisioners.values():
            p.publish_capacity()

    def settle(self, claim: Claim, rounds: int = 6) -> str | None:
        """Schedule and provision until the claim is bound (its node) or nothing moves (None).
        A reschedule (RESOURCE_EXHAUSTED) gives the scheduler another round."""
        for _ in range(rounds):
            node = schedule(self.api, claim)
            if node is None:
                return None
            provisioner = self.provisioners.get(node)
            if provisioner is None:  # the node is gone: nobody provisions for it
                return None
            if provisioner.provision(claim) is not None:
                return node
        return None
