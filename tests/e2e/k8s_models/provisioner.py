"""external-provisioner, modelled on kubernetes-csi/external-provisioner pkg/controller:
controller.go (Provision, and checkError, which sorts a failed CreateVolume into "in background"
(retry, the call may still be running), "reschedule" (RESOURCE_EXHAUSTED with a selected node: the
scheduler picks again) or "finished" (retried after a backoff all the same, by
sig-storage-lib-external-provisioner)) and topology.go (GenerateAccessibilityRequirements)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from tests.e2e.harness import PV, Node
from tests.e2e.k8s_models.clock import Backoff, SimClock, workqueue_backoff
from tests.e2e.k8s_models.objects import Api, Claim
from tests.e2e.node_runtime import Plugin

C = grpc.StatusCode
IN_BACKGROUND = {C.CANCELLED, C.DEADLINE_EXCEEDED, C.UNAVAILABLE, C.ABORTED}
RPC_TIMEOUT = 60.0


@dataclass
class ExternalProvisioner:
    api: Api
    clock: SimClock
    controller: Plugin
    nodes: dict[str, Node]  # their NodeGetInfo is what CSINode objects say
    # The flags of the chart's local shape (charts/csi-hostpath/templates/_local.tpl):
    # --node-deployment with the node's name, --strict-topology, --immediate-topology=false.
    node_deployment: str = ""
    strict_topology: bool = False
    immediate_topology: bool = True
    pending: dict[str, Claim] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=workqueue_backoff)
    outcomes: list[str] = field(default_factory=list)

    def claim(self, claim: Claim) -> None:
        self.pending[claim.name] = claim

    def sync(self) -> None:
        now = self.clock.now
        for name, claim in sorted(self.pending.items()):
            if name in self.api.pvs:  # bound meanwhile (another instance provisioned it)
                del self.pending[name]
                continue
            if not self.check_node(claim) or not self.backoff.allowed(name, now):
                continue
            request = rq.create_volume(
                name, claim.cap, claim.size, requirements=self.requirements(claim)
            )
            try:
                response = self.controller.client.controller.CreateVolume(
                    request, timeout=RPC_TIMEOUT
                )
            except grpc.RpcError as e:
                state = self.check_error(e.code(), bool(claim.selected_node))
                self.outcomes.append(f"{name}: {e.code().name} -> {state}")
                if state == "reschedule":
                    claim.selected_node = ""  # the scheduler will select again
                self.backoff.failed(name, now)
                continue
            self.backoff.forget(name)
            del self.pending[name]
            self.api.pvs[name] = PV(name, response.volume, claim.cap)
            self.outcomes.append(f"{name}: provisioned")

    def check_node(self, claim: Claim) -> bool:
        """controller.go checkNode: without --node-deployment every claim is ours; with it,
        only a claim whose selected node is this node (immediate binding is off in the chart,
        so a claim with no selected node waits for the scheduler)."""
        if not self.node_deployment:
            return True
        return claim.selected_node == self.node_deployment

    @staticmethod
    def check_error(code: grpc.StatusCode, may_reschedule: bool) -> str:
        """controller.go checkError."""
        if code == C.RESOURCE_EXHAUSTED:
            return "reschedule" if may_reschedule else "finished"
        return "in background" if code in IN_BACKGROUND else "finished"

    def _topologies(self) -> dict[str, dict[str, str]]:
        out = {}
        for name, node in self.nodes.items():
            info = node.plugin.client.node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10)
            out[name] = dict(info.accessible_topology.segments)
        return out

    def requirements(self, claim: Claim) -> pb.TopologyRequirement | None:
        """topology.go GenerateAccessibilityRequirements, without allowedTopologies: requisite
        is every node's topology for the driver's keys (aggregateTopologies, sorted and without
        duplicates); preferred starts at the selected node's term (delayed binding) or at a
        hash of the claim's name (immediate binding, --immediate-topology's default)."""
        topologies = self._topologies()
        if claim.selected_node and self.strict_topology:
            # --strict-topology: only the selected node's topology, requisite and preferred.
            only = pb.Topology(segments=topologies[claim.selected_node])
            return pb.TopologyRequirement(requisite=[only], preferred=[only])
        if not claim.selected_node and not self.immediate_topology:
            return None  # neither a selected node nor --immediate-topology: no requirement
        terms = sorted({tuple(sorted(t.items())) for t in topologies.values() if t})
        if not terms:
            return None  # no node has topology keys: no requirement at all
        if claim.selected_node:
            mine = tuple(sorted(topologies.get(claim.selected_node, {}).items()))
            start = terms.index(mine)
        else:
            start = int(hashlib.sha256(claim.name.encode()).hexdigest(), 16) % len(terms)
        preferred = terms[start:] + terms[:start]
        return pb.TopologyRequirement(
            requisite=[pb.Topology(segments=dict(t)) for t in terms],
            preferred=[pb.Topology(segments=dict(t)) for t in preferred],
        )
