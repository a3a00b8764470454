"""What the control plane does about a node that stops posting its status, as far as volumes see
it: pkg/controller/nodelifecycle/node_lifecycle_controller.go (monitorNodeHealth: the Ready
condition goes Unknown after --node-monitor-grace-period) and pkg/controller/podgc/gc_controller.go
(gcTerminating: on a node that is not ready and carries the node.kubernetes.io/out-of-service
taint, pods are force-deleted; the taint's NoExecute effect has already marked them for
deletion)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.e2e.k8s_models.clock import SimClock
from tests.e2e.k8s_models.objects import OUT_OF_SERVICE, Api

# --node-monitor-grace-period: 50 s since Kubernetes 1.32 (40 s before).
NODE_MONITOR_GRACE = 50.0


@dataclass
class NodeLifecycle:
    api: Api
    clock: SimClock

    def sync(self) -> None:
        for node in self.api.nodes.values():
            node.ready = self.clock.now - node.last_status <= NODE_MONITOR_GRACE
            if node.ready or OUT_OF_SERVICE not in node.taints:
                continue
            for pod in list(self.api.pods.values()):
                if pod.node == node.name:
                    pod.deletion_requested = True  # the NoExecute taint evicts it
                    self.api.force_delete_pod(pod.uid)  # gcTerminating
