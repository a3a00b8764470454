"""kube-scheduler, VolumeBinding plugin, for pods whose claims are unbound and late-binding.

Follows kubernetes/kubernetes pkg/scheduler/framework/plugins/volumebinding/binder.go:
- FindPodVolumes -> checkVolumeProvisions: per node, a claim to provision must pass
  hasEnoughCapacity; a node that fails it is filtered out with ErrReasonNotEnoughSpace.
- hasEnoughCapacity: with the CSIDriver's storageCapacity on, some CSIStorageCapacity of the
  claim's class must be capacitySufficient (maximumVolumeSize if set, else capacity, >= the
  claim's request) and nodeHasAccess (its nodeTopology selector matches the node's labels).
- Reserve/PreBind (volume_binding.go, binder.go AssumePodVolumes/BindPodVolumes): the chosen
  node is written into the claim's volume.kubernetes.io/selected-node annotation.
The scoring is not modelled from source: among feasible nodes it picks the one with the most
published capacity (ties by name), standing in for the default scorers that spread pods.
When no node is feasible the pod stays Pending with a FailedScheduling event whose message has
the scheduler's shape: "0/N nodes are available: N node(s) did not have enough free storage."
"""

from __future__ import annotations

from tests.e2e.k8s_models.objects import SELECTED_NODE, Api, Claim, Node, StorageCapacity

ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"  # binder.go
ERR_REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"  # NodeAffinity


def _volume_limit(capacity: StorageCapacity) -> int:
    # binder.go volumeLimit: prefer maximumVolumeSize, it is more precise.
    if capacity.maximum_volume_size is not None:
        return capacity.maximum_volume_size
    return capacity.capacity


def _node_has_access(node: Node, capacity: StorageCapacity) -> bool:
    return all(node.labels.get(k) == v for k, v in capacity.node_topology.items())


def has_enough_capacity(api: Api, claim: Claim, node: Node) -> bool:
    if not api.storage_capacity_tracking:
        return True  # the driver did not opt in: no capacity check
    return any(
        c.storage_class == claim.storage_class
        and _volume_limit(c) >= claim.size
        and _node_has_access(node, c)
        for c in api.capacities.values()
    )


def _published(api: Api, claim: Claim, node: Node) -> int:
    return max(
        (
            _volume_limit(c)
            for c in api.capacities.values()
            if c.storage_class == claim.storage_class and _node_has_access(node, c)
        ),
        default=0,
    )


def schedule(api: Api, claim: Claim) -> str | None:
    """One scheduling attempt for the pod of an unbound claim; the chosen node, or None."""
    if claim.volume_name or claim.annotations.get(SELECTED_NODE):
        return claim.annotations.get(SELECTED_NODE)
    reasons: dict[str, int] = {}
    feasible = []
    for node in sorted(api.nodes.values(), key=lambda n: n.name):
        if any(node.labels.get(k) != v for k, v in claim.pod_affinity.items()):
            reasons[ERR_REASON_NODE_AFFINITY] = reasons.get(ERR_REASON_NODE_AFFINITY, 0) + 1
        elif not has_enough_capacity(api, claim, node):
            reasons[ERR_REASON_NOT_ENOUGH_SPACE] = reasons.get(ERR_REASON_NOT_ENOUGH_SPACE, 0) + 1
        else:
            feasible.append(node)
    if not feasible:
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        api.record(
            "Pod",
            claim.name,
            "FailedScheduling",
            f"0/{len(api.nodes)} nodes are available: {detail}.",
        )
        return None
    chosen = max(feasible, key=lambda n: (_published(api, claim, n), [-ord(c) for c in n.name]))
    claim.annotations[SELECTED_NODE] = chosen.name
    return chosen.name
