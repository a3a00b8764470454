"""Where a new volume may go: the topology a request asks for, against the segments this pool
serves.

Topology follows the spec's order (CSI v1.12 "CreateVolume", TopologyRequirement): the preferred
segments first, in order, then the requisite ones. A local pool serves exactly one segment, its
own node's; a shared pool serves every node, so it names none. A request that names segments
but not this pool's is RESOURCE_EXHAUSTED, the code external-provisioner reschedules on
(pkg/controller/controller.go: checkError, ResourceExhausted with a selected node ->
ProvisioningReschedule, so the scheduler picks another node).
"""

from __future__ import annotations

from collections.abc import Mapping

from csi_hostpath.core.errors import (
    SnapshotNotFound,
    SourceElsewhere,
    TopologyUnsatisfiable,
    VolumeNotFound,
)
from csi_hostpath.core.model import PoolScope, TopologyRequirement
from csi_hostpath.core.naming import snapshot_home
from csi_hostpath.service.controller.controller_context import ControllerContext


def serves(ctx: ControllerContext, segment: Mapping[str, str]) -> bool:
    """Whether this pool can place a volume in the segment (a local pool: its own node's only)."""
    if ctx.pool_scope == PoolScope.SHARED:
        return True
    return segment.get(ctx.topology_key) == ctx.node_id


def snapshot_topology(ctx: ControllerContext, snapshot_id: str) -> list[dict[str, str]]:
    """Where a snapshot can be restored: in local scope, only on the node whose pool holds it."""
    if ctx.pool_scope == PoolScope.SHARED:
        return []
    return [{ctx.topology_key: snapshot_home(snapshot_id) or ctx.node_id}]


def choose_segment(ctx: ControllerContext, requirement: TopologyRequirement | None) -> None:
    """Accept the request's topology if this pool serves one of its segments, tried preferred
    first and in order, then requisite; refuse it (RESOURCE_EXHAUSTED) otherwise."""
    if requirement is None or ctx.pool_scope == PoolScope.SHARED:
        return
    ordered = [*requirement.preferred, *requirement.requisite]
    if not ordered or any(serves(ctx, t) for t in ordered):
        return
    raise TopologyUnsatisfiable(
        f"this pool is local to node {ctx.node_id!r} and can't serve the topology asked "
        f"for (preferred {[dict(t) for t in requirement.preferred]}, requisite "
        f"{[dict(t) for t in requirement.requisite]}); the provisioner should reschedule to "
        "one of those nodes"
    )


def missing_source(ctx: ControllerContext, kind: str, source_id: str) -> Exception:
    """The error for a restore or clone source this pool does not hold.

    In local scope a well-formed ID this pool does not know most likely lives on another node
    (external-provisioner checks that a clone's source claim exists before it calls, in
    controller.go getPVCSource), so the answer is RESOURCE_EXHAUSTED and the provisioner
    reschedules; a snapshot ID names its node, and the message says it."""
    if ctx.pool_scope == PoolScope.SHARED:
        gone = SnapshotNotFound if kind == "snapshot" else VolumeNotFound
        return gone(f"source {kind} {source_id!r} does not exist")
    here = f"this node ({ctx.node_id!r})'s pool does not hold source {kind} {source_id}"
    if kind == "snapshot":
        home = snapshot_home(source_id)
        if home is None or home == ctx.node_id:
            return SnapshotNotFound(f"source snapshot {source_id!r} does not exist")
        return SourceElsewhere(
            f"{here}: it was cut on node {home!r}. A restore is made on the snapshot's node: "
            f"schedule the consumer there (nodeAffinity {ctx.topology_key}={home})"
        )
    return SourceElsewhere(
        f"{here}: a clone is made on its source's node (the node named in the source "
        "PersistentVolume's nodeAffinity), or the source was deleted"
    )
