"""Reconcile on start: repair the kernel to match this node's records (re-attach, re-mount,
re-bind) and drop loop devices of this plugin that no record claims."""

from __future__ import annotations

import logging

from csi_hostpath.core.model import AccessType, Capability, NodeStaging
from csi_hostpath.core.naming import loop_tag, loop_tag_prefix, volume_id_from_tag
from csi_hostpath.service.node_agent import NodeAgent
from csi_hostpath.service.node_ephemeral import InlineVolumes
from csi_hostpath.service.node_mounts import NodeMounts
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool import PoolLayout
from csi_hostpath.system.base import LoopDevice, System

# One logger for all of the node plugin, named as before it was split into modules.
log = logging.getLogger("csi_hostpath.service.node")


class NodeRepair:
    def __init__(
        self,
        node_id: str,
        store: Store,
        system: System,
        layout: PoolLayout,
        mounts: NodeMounts,
        inline: InlineVolumes,
        agent: NodeAgent,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.system = system
        self.layout = layout
        self.mounts = mounts
        self.inline = inline
        self.agent = agent
        self.ephemeral_dir = mounts.ephemeral_dir

    def reconcile(self) -> None:
        """Repair the kernel to match this node's records; drop what no record claims."""
        self.agent.beat()
        self.agent.fence_revoked()
        stagings = {s.volume_id: s for s in self.store.stagings()}
        for s in stagings.values():
            try:
                self._repair_staging(s)
            except Exception:
                log.exception(
                    "repair of staged volume %s failed; the CO's retry will try again", s.volume_id
                )
        for p in self.store.node_publications():
            s2 = stagings.get(p.volume_id)
            if s2 is None:
                log.warning(
                    "repair: %s is recorded as published at %s but not staged; dropping the record",
                    p.volume_id,
                    p.target_path,
                )
                self.system.mounts.unmount(p.target_path)
                self.store.delete_node_publication(p.target_path)
                continue
            if self.system.mounts.find(p.target_path) is None:
                log.warning("repair: re-binding %s at %s", p.volume_id, p.target_path)
                try:
                    self.mounts.bind_target(p.volume_id, s2, p.target_path, p.readonly)
                except Exception:
                    log.exception("re-binding %s failed", p.target_path)
        self.inline.sweep(stagings)
        for device in self.system.loop.list(loop_tag_prefix(self.node_id)):
            vid = volume_id_from_tag(device.tag)
            # A tag names the node, but two plugins misconfigured with one node ID could share
            # a kernel: only a device backed by this plugin's own pool or ephemeral directory is
            # this plugin's to drop.
            backing = device.backing_file
            mine = backing.startswith((f"{self.layout.volumes}/", f"{self.ephemeral_dir}/"))
            if vid is not None and vid not in stagings and mine:
                self._drop_untracked(vid, device)

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

    def _drop_untracked(self, volume_id: str, device: LoopDevice) -> None:
        for m in self.system.mounts.list():
            if m.source == device.path:
                log.warning(
                    "repair: unmounting %s (%s), which no record claims", m.mount_point, volume_id
                )
                self.system.mounts.unmount(m.mount_point, lazy=True)
        log.warning("repair: detaching %s (%s), which no record claims", device.path, volume_id)
        self.system.loop.detach(device.path)
