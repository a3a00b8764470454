"""The publish ledger's use-cases: ControllerPublishVolume and ControllerUnpublishVolume, the
lease files nodes read, the fences nodes report, and the operator's force-detach. The servicer
(api/controller.py) and the `ledger` command both call PublishLedger directly.

publish: decide and commit in one transaction (core.ledger_rules.decide_publish, whose
refuse_multi_attach turns a second node away, under the store's write lock) → write the lease
nodes read. A crash between the two heals on the attacher's retry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from csi_hostpath.core import access, ledger_rules
from csi_hostpath.core.context_keys import ACCESS_TYPE_KEY, GENERATION_KEY, READONLY_KEY
from csi_hostpath.core.errors import NodeNotFound, VolumeNotFound
from csi_hostpath.core.model import Capability, Publication, Volume
from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.controller.revocation import Revocations
from csi_hostpath.service.inflight import InFlight
from csi_hostpath.store.db import AuditEntry, Store
from csi_hostpath.store.pool_layout import PoolLayout


@dataclass
class PublishLedger:
    # Its own short list, not the context: the operator's `ledger` command makes one from its
    # own flags, with no Config and no system layer.
    store: Store
    layout: PoolLayout
    inflight: InFlight
    node_grace: float
    max_volumes_per_node: int = 0

    @classmethod
    def from_context(cls, ctx: ControllerContext) -> PublishLedger:
        """The controller's ledger: it shares the context's in-flight guard with
        ControllerService, so a publish never runs beside a delete of the same volume."""
        return cls(ctx.store, ctx.layout, ctx.inflight, ctx.node_grace, ctx.max_volumes_per_node)

    def publish(
        self, volume_id: str, node_id: str, cap: Capability, readonly: bool
    ) -> dict[str, str]:
        access.check_capability(cap)
        if not is_volume_id(volume_id):
            raise VolumeNotFound(f"volume {volume_id!r} does not exist")
        beat = self.layout.node_record(node_id)
        if beat is None:
            raise NodeNotFound(
                f"node {node_id!r} has never sent a heartbeat to pool {self.layout.root}; is its "
                "node plugin running with this pool?"
            )
        silent_for = beat.age()
        with self.inflight.hold(volume_id, "ControllerPublishVolume"):
            # A record can outlive its file (a state directory restored from an older backup):
            # the pool is the truth, so there is nothing to publish.
            if not self.layout.volume_file(volume_id).exists():
                if self.store.get_volume(volume_id) is None:  # no record either: NOT_FOUND
                    raise VolumeNotFound(f"volume {volume_id!r} does not exist")
                raise VolumeNotFound(
                    f"volume {volume_id} has lost its backing file "
                    f"{self.layout.volume_file(volume_id)}: its record outlived its data (a "
                    "state directory restored from an older backup?); delete the volume"
                )

            def decide(
                volume: Volume, holders: list[Publication], count: int, generation: int
            ) -> ledger_rules.PublishDecision:
                return ledger_rules.decide_publish(
                    volume,
                    node_id,
                    cap,
                    readonly,
                    holders,
                    count,
                    self.max_volumes_per_node,
                    generation,
                    time.time(),
                    heartbeat_age=silent_for,
                    node_grace=self.node_grace,
                )

            # decide runs inside the store's BEGIN IMMEDIATE transaction: the write lock is taken
            # before the holders are read, so two publishes of one volume, from two threads or
            # from the controller and the `ledger` command, never both see it free.
            decision = self.store.publish_atomically(volume_id, node_id, decide, actor="controller")
            # Written on every call, including repeats: a crash between the commit and this
            # write heals when the attacher retries.
            self.write_lease(volume_id)
            if isinstance(decision, ledger_rules.Publish):
                p = decision.publication
                log.info(
                    "published %s to node %s mode=%s ro=%s generation=%d",
                    volume_id,
                    node_id,
                    p.access_mode.name,
                    p.readonly,
                    p.generation,
                )
            granted = decision.publication
            return {
                GENERATION_KEY: str(granted.generation),
                READONLY_KEY: "true" if granted.readonly else "false",
                ACCESS_TYPE_KEY: granted.access_type.value,
            }

    def unpublish(self, volume_id: str, node_id: str) -> None:
        if not is_volume_id(volume_id):
            return
        with self.inflight.hold(volume_id, "ControllerUnpublishVolume"):
            revocations = Revocations(self.layout.heartbeats(volume_id), volume_id, self.node_grace)
            removed = self.store.unpublish(
                volume_id, node_id, actor="controller", classify=revocations
            )
            if self.store.get_volume(volume_id) is not None:
                self.write_lease(volume_id)
            for p in removed:
                if p.node_id in revocations.revoked:
                    log.warning("REVOKED %s: %s", volume_id, revocations.revoked[p.node_id])
                    continue
                log.info(
                    "unpublished %s from node %s (generation %d)",
                    volume_id,
                    p.node_id,
                    p.generation,
                )

    def write_lease(self, volume_id: str) -> None:
        sync_lease(self.store, self.layout, volume_id)

    def reconcile(self) -> None:
        """Make every lease file say what the ledger says. Backing files no record claims were
        re-adopted or quarantined before this (backing_files.py): none is removed here."""
        for volume in self.store.all_volumes():
            lease = self.layout.read_lease(volume.volume_id)
            holders = {
                p.node_id: p.generation for p in self.store.publications(volume_id=volume.volume_id)
            }
            if lease is None and not holders:
                continue
            if lease is None or lease.holders != holders:
                log.warning(
                    "repair: lease of %s said %s, ledger says %s; rewriting",
                    volume.volume_id,
                    lease.holders if lease else None,
                    holders,
                )
                self.write_lease(volume.volume_id)
            if not self.layout.volume_file(volume.volume_id).exists():
                log.warning(
                    "volume %s has no backing file in %s", volume.volume_id, self.layout.volumes
                )

    def import_events(self) -> int:
        return import_node_events(self.store, self.layout)

    # ----- for the operator (the `ledger` command) -----
    def holders(self, volume_id: str = "") -> list[tuple[Publication, float | None]]:
        """Every hold (of one volume, or all), each with its node's heartbeat age (None: the
        node never wrote one)."""
        held = []
        for p in self.store.publications(volume_id=volume_id):
            beat = self.layout.heartbeat(p.node_id)
            held.append((p, beat.age() if beat else None))
        return held

    def audit(self, volume_id: str = "", *, read_only: bool = False) -> list[AuditEntry]:
        """The audit trail, the fences nodes reported since the last import included. read_only:
        those are shown from the pool, not imported (the controller imports them)."""
        if not self.layout.events.is_dir():
            return self.store.audit(volume_id)
        if not read_only:
            import_node_events(self.store, self.layout)
            return self.store.audit(volume_id)
        recorded = self.store.audit_event_ids()
        pending = []
        for path, event in self.layout.take_events():
            row = _event_row(path, event)
            if row[-1] not in recorded and (not volume_id or row[2] == volume_id):
                at = float(event.get("at") or path.stat().st_mtime)
                pending.append(AuditEntry(0, at, *row[:-1]))
        return self.store.audit(volume_id) + sorted(pending, key=lambda e: e.at)

    def force_detach(
        self, volume_id: str, node_id: str, *, accept_data_loss: bool, actor: str, reason: str
    ) -> tuple[Publication | None, float | None]:
        """Take node_id's hold away when core.ledger_rules.decide_force_detach allows it (the node
        silent past the grace period, or the operator accepting the risk), and write the lease
        so the node fences itself if it comes back. Returns the revoked hold (None: the node
        held nothing, nothing to do) and the node's heartbeat age."""
        beat = self.layout.heartbeat(node_id)
        age = beat.age() if beat else None

        def check(p: Publication) -> None:
            ledger_rules.decide_force_detach(p, age, self.node_grace, accept_data_loss)

        revoked = self.store.force_detach(volume_id, node_id, check, actor, reason)
        if revoked is not None:
            sync_lease(self.store, self.layout, volume_id)
            log.warning("FORCE-DETACHED %s from node %s by %s", volume_id, node_id, actor)
        return revoked, age


def sync_lease(store: Store, layout: PoolLayout, volume_id: str) -> None:
    """Write the lease file nodes read so that it says what the ledger says."""
    newest, holders = store.lease(volume_id)
    # Not fsynced: the lease is a cache of the durable ledger, rewritten whole on every change
    # and by reconcile before the controller serves. A lease lost in a crash reads as unknown:
    # nodes refuse to stage (the attacher retries) and fence nothing (see core.ledger).
    layout.write_lease(ledger_rules.Lease(volume_id, newest, holders))


def import_node_events(store: Store, layout: PoolLayout) -> int:
    """Move node-reported events (fences) from the pool into the audit trail."""
    count = 0
    for path, event in layout.take_events():
        store.record(*_event_row(path, event))
        path.unlink(missing_ok=True)
        count += 1
    return count


def _event_row(path: Path, event: dict[str, Any]) -> tuple[str, str, str, str, int, str, str]:
    """A node's reported event as an audit row: actor, action, volume, node, generation,
    reason and the event's id."""
    return (
        "node:" + str(event.get("node_id", "?")),
        str(event.get("action", "?")),
        str(event.get("volume_id", "")),
        str(event.get("node_id", "")),
        int(event.get("generation", 0)),
        str(event.get("reason", "")),
        # Events written before ids were carried in the body are named by their id.
        str(event.get("event_id") or path.stem),
    )
