"""Kernel state that no record claims: re-adopt it, or leave it in place and say so.

A node plugin can start without its records (state.db lost, truncated, a new or mistyped
--state-dir) while pods run on the volumes it staged. A loop device tagged with this node's ID
proves the driver attached it; it does not prove that nothing uses it. So nothing live is torn
down for lack of a record:

- a device whose volume the node's last heartbeat (in the pool, beside the leases) reports staged
  at a path the CO gave, and which is still mounted there, is re-adopted: its staging record and
  its publications are written again from the heartbeat, and the CO's later NodeUnpublish and
  NodeUnstage find them;
- a device still in use (a mount of it or a bind of its node) that can't be re-adopted is left in
  place with a loud warning, and listed under "unclaimed" in the heartbeat for inspect;
- only a device nothing uses (the driver crashed between attach and mount, or between unmount and
  detach) is detached: that is the one thing the driver itself half-made.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from csi_hostpath.core.model import AccessMode, AccessType, NodePublication, NodeStaging
from csi_hostpath.core.naming import loop_tag_prefix, volume_id_from_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts
from csi_hostpath.store.pool_layout import Heartbeat
from csi_hostpath.system.base import LoopDevice, MountEntry


class Unclaimed:
    """What this node left in place because no record claims it, and why: volume ID -> its
    heartbeat entry. Repair leaves entries; the agent reports them in the heartbeat (so inspect
    shows them and no other node stages them) and drops one once its device is gone."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}

    def leave(self, volume_id: str, entry: dict[str, Any]) -> None:
        self._entries[volume_id] = entry

    def drop(self, volume_id: str) -> None:
        self._entries.pop(volume_id, None)

    # A pure delegation, kept: the entries are this class's own, and a caller reads one entry
    # (the agent's heartbeat) without being handed the dict that repair and the agent change.
    def get(self, volume_id: str) -> dict[str, Any] | None:
        return self._entries.get(volume_id)

    def entries(self) -> dict[str, dict[str, Any]]:
        """A copy: the caller may keep or change it."""
        return dict(self._entries)

    def __contains__(self, volume_id: object) -> bool:
        return volume_id in self._entries


class NodeAdopt:
    def __init__(self, ctx: NodeContext, mounts: NodeMounts, unclaimed: Unclaimed) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.mounts = mounts
        self.owned_dirs = (
            str(ctx.layout.volumes),
            str(mounts.inline_dir),
            str(mounts.ephemeral_dir),  # inline files made before they moved to the pool
        )
        self.unclaimed = unclaimed

    def devices_without_record(self, claimed: set[str]) -> list[tuple[str, LoopDevice]]:
        found = []
        for device in self.system.loop.list(loop_tag_prefix(self.node_id)):
            vid = volume_id_from_tag(device.tag)
            # A tag names the node, but two plugins misconfigured with one node ID could share
            # a kernel: only a device backed by this plugin's own pool or ephemeral file is this
            # plugin's to look after. Compared by the file's device and inode, never its path:
            # the kernel reports the path as the attaching process saw it, and after a restart
            # in a new container (a kind node's plugin) that is another mount namespace and root.
            if vid is None or vid in claimed or not self._backed_by_ours(vid, device):
                continue
            found.append((vid, device))
        return found

    def _backed_by_ours(self, volume_id: str, device: LoopDevice) -> bool:
        files = [Path(d) / f"{volume_id}.img" for d in self.owned_dirs]
        if any(device.backed_by(f) for f in files):
            return True
        if any(f.exists() for f in files):
            return False  # our file is another inode: this device is someone else's
        # The file is gone (removed under the device): only the reported path is left to go by.
        return device.backing_file.startswith(tuple(f"{d}/" for d in self.owned_dirs))

    def users(self, device: LoopDevice) -> list[MountEntry]:
        return [m for m in self.system.mounts.list() if self.mounts.is_ours(m, device)]

    def claim(self, volume_id: str, device: LoopDevice, previous: Heartbeat | None) -> None:
        """Re-adopt, leave in place, or (only if nothing uses it) detach one unclaimed device."""
        if self.store.get_staging(volume_id) is not None:  # a retry, after a NodeStage claimed it
            self.unclaimed.drop(volume_id)
            return
        users = self.users(device)
        entry = previous.volumes.get(volume_id) if previous is not None else None
        if isinstance(entry, dict):
            why = self._adopt(volume_id, device, entry)
            if not why:
                self.unclaimed.drop(volume_id)
                return
        else:
            why = "this node's last heartbeat does not list it"
        if users:
            self.unclaimed.leave(volume_id, {
                "unclaimed": why,
                "device": device.path,
                "mounts": sorted(m.mount_point for m in users),
            })  # fmt: skip
            log.warning(
                "UNCLAIMED VOLUME LEFT IN PLACE: %s on %s is in use (mounted at %s) but no record "
                "claims it and it can't be re-adopted (%s). Nothing is unmounted or detached: the "
                "CO's NodeUnpublish/NodeUnstage, or an operator, takes it down",
                volume_id,
                device.path,
                ", ".join(m.mount_point for m in users),
                why,
            )
            return
        log.warning(
            "repair: detaching %s (%s): no record claims it and nothing uses it (a crash "
            "between attach and mount, or between unmount and detach)",
            device.path,
            volume_id,
        )
        self.system.loop.detach(device)
        self.unclaimed.drop(volume_id)

    def _adopt(self, volume_id: str, device: LoopDevice, entry: dict[str, Any]) -> str:
        """Write the records back from the heartbeat; '' when adopted, else why not."""
        try:
            access_type = AccessType(entry["access_type"])
            access_mode = AccessMode[entry["access_mode"]]
            staging = str(entry["staging"])
            generation = int(entry["generation"])
            fs_type = str(entry.get("fs_type", ""))
            readonly = bool(entry.get("readonly", device.read_only))
            publications = list(entry.get("publications", []))
            staged_at = float(entry.get("staged_at", time.time()))
        except (KeyError, ValueError, TypeError):
            return "the heartbeat's entry lacks the access mode (written by an older version)"
        if access_type == AccessType.MOUNT:
            mounted = self.system.mounts.find(staging)
            if mounted is None or mounted.source != device.path:
                return f"the heartbeat says staged at {staging}, but it is not mounted there"
        self.store.save_staging(
            NodeStaging(
                volume_id,
                staging,
                access_type,
                access_mode,
                fs_type,
                device.path,
                generation,
                staged_at,
                readonly,
            )
        )
        log.warning(
            "repair: RE-ADOPTED %s on %s, staged at %s: no record claimed it (lost state?); "
            "its records are written again from this node's last heartbeat",
            volume_id,
            device.path,
            staging,
        )
        for p in publications:
            target = str(p.get("target", ""))
            present = self.system.mounts.find(target) if target else None
            if present is None or not self.mounts.is_ours(present, device):
                continue
            if self.store.get_node_publication(target) is not None:
                continue
            self.store.save_node_publication(
                NodePublication(
                    volume_id,
                    target,
                    bool(p.get("readonly", False)),
                    access_mode,
                    access_type,
                    tuple(str(f) for f in p.get("mount_flags", [])),
                )
            )
            log.warning("repair: re-adopted the publication of %s at %s", volume_id, target)
        return ""
