"""Reconcile on start: repair the kernel to match this node's records (re-attach, re-mount,
re-bind), item by item; kernel state no record claims goes to node_adopt."""

from __future__ import annotations

import functools
from collections.abc import Callable

from csi_hostpath.core.errors import Busy
from csi_hostpath.core.model import AccessType, Capability, NodePublication, NodeStaging
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.adopt import NodeAdopt, Unclaimed
from csi_hostpath.service.node.heartbeat import NodeAgent
from csi_hostpath.service.node.inline import InlineVolumes
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts
from csi_hostpath.store.pool_layout import Heartbeat


class NodeRepair:
    def __init__(
        self,
        ctx: NodeContext,
        mounts: NodeMounts,
        inline: InlineVolumes,
        agent: NodeAgent,
        unclaimed: Unclaimed,
    ) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self.mounts = mounts
        self.inline = inline
        self.agent = agent
        self.unclaimed = unclaimed
        self.adopt = NodeAdopt(ctx, mounts, unclaimed)
        # Item name -> (volume ID or "", the step): what failed and is retried.
        self.pending: dict[str, tuple[str, Callable[[], object]]] = {}

    def reconcile(self) -> None:
        """Repair the kernel to match this node's records, item by item: an item that fails is
        logged with its reason and retried on each fence pass, and the plugin starts and serves
        whatever happens to one volume. Kernel state no record claims is re-adopted or left in
        place (node_adopt), never torn down for lack of a record."""
        # Read before this start's first heartbeat overwrites it: it is what re-adopts volumes
        # whose records are lost.
        previous = self.layout.heartbeat(self.node_id)
        self._item("unclaimed devices", "", functools.partial(self._claim_all, previous))
        self._item("heartbeat", "", self.agent.beat)
        self._item("fence pass", "", self.agent.fence_revoked)
        for s in self.store.stagings():
            self._item(f"staging of {s.volume_id}", s.volume_id,
                       functools.partial(self._repair_staging, s))  # fmt: skip
        for p in self.store.node_publications():
            self._item(f"publication of {p.volume_id} at {p.target_path}", p.volume_id,
                       functools.partial(self._repair_publication, p))  # fmt: skip
        self._item("inline volume sweep", "", self._sweep_inline)
        if self.pending:
            log.warning(
                "repair: %d item(s) could not be repaired yet (%s); serving anyway and retrying "
                "every fence interval",
                len(self.pending),
                "; ".join(self.pending),
            )

    def retry(self) -> None:
        """Run again what reconcile could not do (called by the agent's fence pass)."""
        if not self.pending:
            return
        for name, (volume_id, step) in list(self.pending.items()):
            if not volume_id:
                self._item(name, volume_id, step)
                continue
            try:
                with self.agent.inflight.hold(volume_id, "repair"):
                    self._item(name, volume_id, step)
            except Busy:
                pass  # an RPC is working on the volume; try again on the next pass
        if not self.pending:
            log.info("repair: every item that failed at start is repaired now")

    def _item(self, name: str, volume_id: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as e:
            first = name not in self.pending
            self.pending[name] = (volume_id, step)
            log.warning(
                "repair: %s failed%s: %s: %s",
                name,
                "" if first else " again",
                type(e).__name__,
                e,
                exc_info=first,
            )
            return
        if self.pending.pop(name, None) is not None:
            log.warning("repair: %s succeeded on retry", name)

    def _claim_all(self, previous: Heartbeat | None) -> None:
        claimed = {s.volume_id for s in self.store.stagings()}
        for vid, device in self.adopt.devices_without_record(claimed):
            self._item(f"unclaimed device {device.path} ({vid})", vid,
                       functools.partial(self.adopt.claim, vid, device, previous))  # fmt: skip

    def _sweep_inline(self) -> None:
        self.inline.sweep({s.volume_id: s for s in self.store.stagings()})

    def _repair_publication(self, p: NodePublication) -> None:
        staged = self.store.get_staging(p.volume_id)
        mounted = self.system.mounts.find(p.target_path)
        if staged is None:
            if mounted is not None:
                # A pod may be using it: the CO's NodeUnpublish takes it down, with the record.
                log.warning(
                    "repair: %s is recorded as published at %s but not staged; left mounted "
                    "(and recorded) for the CO's NodeUnpublish",
                    p.volume_id,
                    p.target_path,
                )
                return
            log.warning(
                "repair: %s is recorded as published at %s but not staged, and nothing is "
                "mounted there; dropping the record",
                p.volume_id,
                p.target_path,
            )
            self.store.delete_node_publication(p.target_path)
            return
        if mounted is None:
            log.warning("repair: re-binding %s at %s", p.volume_id, p.target_path)
            self.mounts.bind_target(p.volume_id, staged, p.target_path, p.readonly)

    def _repair_staging(self, s: NodeStaging) -> None:
        backing = self.mounts.backing_for(s)
        if not backing.exists():
            log.warning(
                "volume %s is staged but its backing file is gone; leaving it for NodeUnstage",
                s.volume_id,
            )
            return
        device = self.system.loop.find(loop_tag(self.node_id, s.volume_id))
        if device is None:
            device = self.mounts.attach(s.volume_id, backing, read_only=s.readonly)
            log.warning("repair: re-attached %s on %s", s.volume_id, device.path)
        if s.access_type == AccessType.MOUNT and self.system.mounts.find(s.staging_path) is None:
            cap = Capability(AccessType.MOUNT, s.access_mode, s.fs_type)
            self.mounts.mount_staging(
                s.volume_id, device.path, s.staging_path, s.fs_type, cap, read_only=s.readonly
            )
            log.warning("repair: re-mounted %s at %s", s.volume_id, s.staging_path)
        if device.path != s.device:
            self.store.save_staging(
                NodeStaging(
                    s.volume_id,
                    s.staging_path,
                    s.access_type,
                    s.access_mode,
                    s.fs_type,
                    device.path,
                    s.generation,
                    s.staged_at,
                    s.readonly,
                )
            )
