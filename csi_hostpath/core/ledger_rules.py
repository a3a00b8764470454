"""The publish ledger's decisions, as pure functions over the rows that exist.

The store runs these inside one BEGIN IMMEDIATE transaction, so the decision and its commit are
atomic across threads and processes. Every rule lives here, where it can be tested exhaustively.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from csi_hostpath.core.access import (
    BLOCK_ONLY_MODES,
    SINGLE_NODE_MODES,
    effective_readonly,
)
from csi_hostpath.core.errors import (
    Incompatible,
    NodeAlive,
    NodeSilent,
    NodeVolumeLimit,
    PublishedElsewhere,
    Unsupported,
)
from csi_hostpath.core.model import AccessMode, AccessType, Capability, Publication, Volume


@dataclass(frozen=True, slots=True)
class AlreadyPublished:
    publication: Publication


@dataclass(frozen=True, slots=True)
class Publish:
    """Add this row; its generation is the volume's next fencing token."""

    publication: Publication


PublishDecision = AlreadyPublished | Publish


def describe_holder(p: Publication) -> str:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.published_at))
    how = "read-only" if p.readonly else "read-write"
    return (
        f"node {p.node_id!r} ({p.access_mode.name}, {how}, since {since}, "
        f"generation {p.generation})"
    )


def decide_publish(
    volume: Volume,
    node_id: str,
    cap: Capability,
    readonly: bool,
    holders: Sequence[Publication],
    node_publication_count: int,
    max_volumes_per_node: int,
    current_generation: int,
    now: float,
    *,
    heartbeat_age: float = 0.0,
    node_grace: float = math.inf,
) -> PublishDecision:
    """Decide a ControllerPublishVolume. holders are the volume's rows; node_publication_count
    counts the rows the node holds for *other* volumes; heartbeat_age is how long the node has
    been silent, against node_grace."""
    if cap.access_type not in {c.access_type for c in volume.capabilities}:
        raise Unsupported(
            f"volume {volume.volume_id} was created for "
            f"{'/'.join(sorted({c.access_type.value for c in volume.capabilities}))} access, "
            f"not {cap.access_type.value}"
        )
    if cap.access_type == AccessType.MOUNT and cap.access_mode in BLOCK_ONLY_MODES:
        raise Unsupported(f"{cap.access_mode.name} is only served for block volumes")
    ro = effective_readonly(cap.access_mode, readonly)

    mine = [h for h in holders if h.node_id == node_id]
    if mine:
        held = mine[0]
        if (held.access_mode, held.access_type, held.readonly) == (
            cap.access_mode,
            cap.access_type,
            ro,
        ):
            return AlreadyPublished(held)
        raise Incompatible(
            f"volume {volume.volume_id} is already published to node {node_id!r} as "
            f"{held.access_mode.name}/{held.access_type.value}/"
            f"{'ro' if held.readonly else 'rw'}; unpublish it before publishing it differently"
        )
    # Only a hold the node still has is repeated for a silent node. external-attacher's
    # ReconcileVA (pkg/controller/csi_handler.go) re-requests every VolumeAttachment that
    # ListVolumes no longer shows as published, and a stale VolumeAttachment of a frozen node
    # outlives its force-detach: a new hold for a silent node would undo the force-detach.
    _check_not_silent(volume.volume_id, node_id, heartbeat_age, node_grace)

    others = [h for h in holders if h.node_id != node_id]
    if others:
        refuse_multi_attach(volume.volume_id, cap.access_mode, ro, others)

    if max_volumes_per_node and node_publication_count >= max_volumes_per_node:
        raise NodeVolumeLimit(
            f"node {node_id!r} already holds {node_publication_count} volumes, its limit "
            f"(--max-volumes-per-node {max_volumes_per_node}): unpublish one of them from it "
            "(end a pod that uses it), publish this volume to another node, or start the "
            "driver with a higher --max-volumes-per-node"
        )
    return Publish(
        Publication(
            volume_id=volume.volume_id,
            node_id=node_id,
            access_mode=cap.access_mode,
            access_type=cap.access_type,
            readonly=ro,
            generation=current_generation + 1,
            published_at=now,
        )
    )


def _check_not_silent(volume_id: str, node_id: str, age: float, grace: float) -> None:
    if age >= grace:
        raise NodeSilent(
            f"node {node_id!r} has sent no heartbeat for {age:.0f}s, longer than the "
            f"{grace:.0f}s grace period (--node-grace): it may be gone or force-detached, so it "
            f"gets no new hold on volume {volume_id}. A node that comes back beats again "
            "within its heartbeat interval, and a retry then succeeds"
        )


def refuse_multi_attach(
    volume_id: str, mode: AccessMode, readonly: bool, others: Sequence[Publication]
) -> None:
    exclusive = [h for h in others if h.access_mode in SINGLE_NODE_MODES]
    if mode in SINGLE_NODE_MODES or exclusive:
        held = exclusive or list(others)
        raise PublishedElsewhere(
            f"volume {volume_id} is {'held by ' + ', '.join(describe_holder(h) for h in held)}; "
            f"{mode.name if mode in SINGLE_NODE_MODES else held[0].access_mode.name} allows one "
            "node at a time. Waiting for that node to unpublish is the safe path; if the node is "
            "gone for good, see 'csi-hostpath ledger force-detach'"
        )
    any_reader_only = mode == AccessMode.MULTI_NODE_READER_ONLY or any(
        h.access_mode == AccessMode.MULTI_NODE_READER_ONLY for h in others
    )
    writers = [h for h in others if not h.readonly]
    if any_reader_only and (writers or not readonly):
        raise PublishedElsewhere(
            f"volume {volume_id} is shared MULTI_NODE_READER_ONLY: every node must be read-only, "
            f"but {'a new writer' if not readonly else describe_holder(writers[0])} would write"
        )
    single_writer = mode == AccessMode.MULTI_NODE_SINGLE_WRITER or any(
        h.access_mode == AccessMode.MULTI_NODE_SINGLE_WRITER for h in others
    )
    if single_writer and not readonly and writers:
        raise PublishedElsewhere(
            f"volume {volume_id} allows a single writer and already has one: "
            f"{describe_holder(writers[0])}"
        )


def decide_force_detach(
    publication: Publication,
    heartbeat_age: float | None,
    node_grace: float,
    accept_data_loss: bool,
) -> None:
    """Raise NodeAlive unless force-detaching is a decision the operator may take now."""
    if accept_data_loss:
        return
    if not math.isfinite(node_grace) or node_grace <= 0:
        # A nan grace makes `age < grace` false for every age: the live node would be revoked.
        raise NodeAlive(
            f"node grace must be a finite number of seconds > 0, got {node_grace!r}; "
            "refusing to decide whether node "
            f"{publication.node_id!r} is gone"
        )
    if heartbeat_age is not None and heartbeat_age < node_grace:
        raise NodeAlive(
            f"node {publication.node_id!r} heartbeat is {heartbeat_age:.0f}s old, younger than "
            f"the {node_grace:.0f}s grace period: it may still be writing to volume "
            f"{publication.volume_id}. Wait, or pass --i-accept-data-loss if you know it is gone"
        )


FORCED_UNPUBLISH = "revoke"


def classify_unpublish(
    publication: Publication, heartbeat_age: float | None, staged_there: bool, node_grace: float
) -> tuple[str, str]:
    """(audit action, reason) for a ControllerUnpublishVolume that removes this row.

    Kubernetes detaches after the kubelet unstaged, unless it forces the detach: the
    attach-detach controller's reconciler (pkg/controller/volume/attachdetach/reconciler,
    reconcile) detaches a volume still mounted on a node after maxWaitForUnmountDuration (6
    minutes) when the node is unhealthy, and at once when the node carries the
    node.kubernetes.io/out-of-service taint. Both arrive here as a plain ControllerUnpublish. A
    silent node, or one whose heartbeat still lists the volume as staged, is therefore being
    force-detached: the row is revoked, as `ledger force-detach` revokes it, and the node fences
    itself when it next reads its lease."""
    silent = heartbeat_age is None or not heartbeat_age < node_grace
    if not silent and not staged_there:
        return "unpublish", ""
    why = []
    if silent:
        why.append(
            "has never sent a heartbeat"
            if heartbeat_age is None
            else f"has been silent for {heartbeat_age:.0f}s (grace {node_grace:.0f}s)"
        )
    if staged_there:
        why.append("still lists the volume as staged in its heartbeat")
    return FORCED_UNPUBLISH, (
        f"ControllerUnpublishVolume without NodeUnstage: node {publication.node_id!r} "
        f"{' and '.join(why)}; Kubernetes force-detached it (out-of-service taint, or "
        f"the 6-minute maxWaitForUnmountDuration); generation {publication.generation} revoked"
    )


@dataclass(frozen=True, slots=True)
class Lease:
    """What the controller tells nodes about a volume: who holds it under which token."""

    volume_id: str
    generation: int  # the newest token ever issued for the volume
    holders: dict[str, int]  # node_id -> the generation it holds


def grants(lease: Lease | None, node_id: str, generation: int) -> bool:
    """May node_id stage the volume under this fencing token? Only on a lease that says so."""
    return lease is not None and lease.holders.get(node_id) == generation


def is_revoked(lease: Lease | None, node_id: str, staged_generation: int) -> bool:
    """Must a node that staged the volume under this token stop using it now?

    Only a lease that exists and no longer grants the token revokes it. A missing or unreadable
    lease is "unknown", not "revoked": leases are a cache of the durable ledger, rewritten whole
    on every change and on controller start, and a torn write must never shut a rightful
    holder's filesystem down. Generations only grow, and a grant is never given back under the
    same generation, so a lease at least as new as the token that does not list it is final.
    """
    if lease is None or lease.generation < staged_generation:
        # A lease older than the token (a slow writer's late rename, or a write lost in a
        # crash) can't speak about a grant it predates.
        return False
    return lease.holders.get(node_id) != staged_generation


def fenced_stagers(lease: Lease | None, staged: dict[str, int]) -> list[tuple[str, int]]:
    """The nodes (with their token) that report the volume staged under a token the lease
    revokes: force-detached, they may hold it until their fence pass. A token of 0 is a staging
    made without the ledger, which nothing fences."""
    return [
        (node_id, generation)
        for node_id, generation in sorted(staged.items())
        if generation and is_revoked(lease, node_id, generation)
    ]
