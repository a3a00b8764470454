"""Where a new volume may go, and whether the pool can still promise its size.

Topology follows the spec's order (CSI v1.12 "CreateVolume", TopologyRequirement): the preferred
segments first, in order, then the requisite ones. A local pool serves exactly one segment, its
own node's; a shared pool serves every node, so it names none. A request that names segments
but not this pool's is RESOURCE_EXHAUSTED, the code external-provisioner reschedules on
(pkg/controller/controller.go: checkError, ResourceExhausted with a selected node ->
ProvisioningReschedule, so the scheduler picks another node).

Capacity: the thin-pool rule lives in core/capacity.py; this module measures its inputs (the
pool's free space, every volume's size and allocation) and keeps concurrent CreateVolume calls
from promising the same bytes twice.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath.core.capacity import promisable_sums, refuse_unpromisable
from csi_hostpath.core.errors import (
    DriverError,
    NoCapacity,
    SnapshotNotFound,
    SourceElsewhere,
    TopologyUnsatisfiable,
    VolumeNotFound,
)
from csi_hostpath.core.model import PoolScope, TopologyRequirement
from csi_hostpath.core.naming import snapshot_home
from csi_hostpath.service.controller.allocations import Allocations
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


class Capacity:
    """The pool's promise book: measured on each call (the volumes' allocations through a
    conservative cache, service/controller/allocations.py; their sizes as the store's running
    total), serialised for the create path."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx  # its flags: overcommit_ratio, max_volume_size
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self._lock = threading.Lock()
        # CreateVolume name -> the size promised while its file exists but its row does not yet
        self._pending: dict[str, int] = {}
        pool, layout = self.system.pool, self.layout
        # Keys are volume IDs, and inline volumes' paths (POOL/inline/<node key>/vol-*.img).
        self.allocations = Allocations(
            lambda key: pool.allocated(
                Path(key) if key.startswith("/") else layout.volume_file(key)
            )
        )

    def _sums(self, free_now: int, live: Collection[str]) -> tuple[int, int, int]:
        """(free space to count, what the thin files have written, their sizes): from the
        store's running total and the cache's, so no call reads every volume's row."""
        pool = self.system.pool
        # Inline ephemeral volumes are thin files in the same pool (service/node/inline.py),
        # made by node plugins with no row here, and written to while they exist.
        inline = {
            str(path): size
            for path in self.layout.root.glob("inline/*/vol-*.img")
            if (size := pool.size(path)) is not None
        }

        def size_of(key: str) -> int | None:
            return inline.get(key) if key.startswith("/") else self.store.volume_size(key)

        written, free = self.allocations.written(
            free_now,
            lambda: [*self.store.volume_sizes(), *inline.items()],
            size_of,
            {*live, *inline},
        )
        # A volume being created is promised before its row exists; its file may have written
        # nothing yet.
        promised = self.store.promised_bytes() + sum(inline.values()) + sum(self._pending.values())
        return free, written, promised

    def available(self, exact: bool = True) -> tuple[int, int]:
        """(bytes still promisable, the largest volume that can be made now). Exact measures
        again the volumes nodes hold (GetCapacity's answer); otherwise their cached allocations
        may be low after writes, and so the answer (a promise, checked again before a refusal)."""
        free_now = self.system.pool.free_bytes()
        live = self.store.published_volume_ids() if exact else ()
        free, written, promised = self._sums(free_now, live)
        available = promisable_sums(free, written, promised, self.ctx.overcommit_ratio)
        limit = self.ctx.max_volume_size
        return available, min(available, limit) if limit else available

    @contextmanager
    def promise(
        self, name: str, size_bytes: int, refused: type[DriverError] = NoCapacity
    ) -> Iterator[None]:
        """Promise size_bytes to a volume being created (or grown, by that much), for as long as
        its row does not say so yet; `refused` (NoCapacity: RESOURCE_EXHAUSTED; an expansion
        passes CapacityOutOfRange) when the pool can't promise it."""
        with self._lock:
            available, _ = self.available(exact=False)
            if size_bytes > available:  # the cache errs low: refuse on fresh numbers only
                self.allocations.drop()
                available, _ = self.available()
            refuse_unpromisable(size_bytes, available, self.ctx.overcommit_ratio, refused)
            self._pending[name] = size_bytes
        try:
            yield
        finally:
            with self._lock:
                self._pending.pop(name, None)
