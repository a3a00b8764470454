"""NodeExpandVolume, NodeGetVolumeStats and CSI v1.13's NodeGetVolumeHealth and
NodeGetStorageHealth: what a staged volume's device and filesystem say, its problems (a missing
file, a lost mount or device, a freeze, I/O errors, a full pool), typed once for both the v1.12
VolumeCondition (the worst one's message) and the v1.13 health kinds, and the pool's own health."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from csi_hostpath.core import access, conditions, ledger_rules
from csi_hostpath.core.capacity import POOL_RESERVE_BYTES
from csi_hostpath.core.conditions import Problem, VolumeHealth
from csi_hostpath.core.errors import (
    NotGrownHere,
    NotStaged,
    OnlineResizeUnavailable,
    VolumeNotFound,
)
from csi_hostpath.core.model import AccessType, NodeStaging
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.service.node.inline import InlineVolumes
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts
from csi_hostpath.system.base import FsStats, LoopDevice, NotPermitted


@dataclass(frozen=True, slots=True)
class VolumeStats:
    access_type: AccessType
    total_bytes: int
    available_bytes: int
    used_bytes: int
    total_inodes: int = 0
    free_inodes: int = 0
    used_inodes: int = 0
    abnormal: bool = False
    message: str = ""


class StagedVolumes:
    """Expansion and stats of the volumes this node staged."""

    def __init__(
        self, ctx: NodeContext, mounts: NodeMounts, inline: InlineVolumes, freezes: Freezes
    ) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self.mounts = mounts
        self.inline = inline
        self.freezes = freezes
        self.inflight = ctx.inflight
        # NodeGetVolumeHealth calls a volume DEGRADED once a freeze is this old (seconds): half
        # of --max-freeze-seconds, a freeze half-way to its watchdog's thaw.
        self.frozen_after = ctx.max_freeze_seconds / 2

    def expand(self, volume_id: str, volume_path: str, required_bytes: int) -> int:
        """Make the loop device and the filesystem on it follow a grown backing file."""
        staged, _ = self._staged_at(volume_id, volume_path)
        with self.inflight.hold(staged.volume_id, "NodeExpandVolume"):
            device = self.system.loop.find(loop_tag(self.node_id, staged.volume_id))
            if device is None:
                raise NotStaged(f"volume {volume_id} has no loop device here; stage it again")
            self.system.loop.refresh_capacity(device.path)
            size = self.system.devices.size(device.path)
            if required_bytes and size < required_bytes:
                raise NotGrownHere(
                    f"the backing file holds {size} bytes, less than the {required_bytes} "
                    "asked for; expand the volume through the controller first"
                )
            if staged.access_type == AccessType.MOUNT:
                try:
                    self.system.fs.grow(device.path, staged.staging_path, staged.fs_type)
                except NotPermitted as e:
                    if staged.fs_type == "ext4":
                        raise OnlineResizeUnavailable(
                            f"online ext4 resize of {volume_id} was refused (the plugin lacks "
                            "CAP_SYS_RESOURCE); the filesystem grows to the new size on its "
                            "next stage"
                        ) from e
                    raise
            log.info("expanded %s on this node to %d bytes", volume_id, size)
            return size

    def _staged_at(self, volume_id: str, volume_path: str) -> tuple[NodeStaging, str]:
        """The staging record of a volume published or staged at volume_path, or NOT_FOUND."""
        resolved = self.inline.resolve(volume_id)
        if resolved is None:
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = os.path.normpath(volume_path)
        staged = self.store.get_staging(resolved)
        targets = {p.target_path for p in self.store.node_publications(resolved)}
        if staged is None or (path != staged.staging_path and path not in targets):
            raise VolumeNotFound(f"volume {volume_id} is not staged or published at {volume_path}")
        return staged, path

    def _problems(
        self, staged: NodeStaging, path: str | None, frozen_after: float
    ) -> tuple[list[Problem], LoopDevice | None]:
        """What is wrong with a staged volume, worst first, and its loop device. A hold the
        ledger revoked comes first: the node must stop using the volume whatever else holds."""
        found, device = self._kernel_problems(staged, path, frozen_after)
        lease = self.layout.read_lease(staged.volume_id)
        if ledger_rules.fenced_stagers(lease, {self.node_id: staged.generation}):
            fenced = conditions.fenced_here(staged.volume_id, staged.generation)
            found = [Problem(VolumeHealth.INACCESSIBLE, conditions.FENCED, fenced), *found]
        return found, device

    def _kernel_problems(
        self, staged: NodeStaging, path: str | None, frozen_after: float
    ) -> tuple[list[Problem], LoopDevice | None]:
        """What the pool and the kernel say of a staged volume. A freeze counts once it is
        frozen_after seconds old (a snapshot's short freeze is no fault)."""
        volume_id = staged.volume_id
        if not self.mounts.backing_for(staged).exists():
            return [
                Problem(
                    VolumeHealth.INACCESSIBLE,
                    "BackingFileMissing",
                    f"the backing file of {volume_id} is missing from the pool: its data is "
                    "gone unless a snapshot exists",
                )
            ], None
        if path is not None and self.system.mounts.find(path) is None:
            return [
                Problem(
                    VolumeHealth.INACCESSIBLE,
                    "NotMounted",
                    f"{path} is not mounted any more; unpublish and publish it again",
                )
            ], None
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        if device is None:
            return [
                Problem(
                    VolumeHealth.INACCESSIBLE,
                    "LoopDeviceGone",
                    f"volume {volume_id} has no loop device on this node; stage it again",
                )
            ], None
        found = []
        frozen = self.freezes.recorded(volume_id)
        if frozen is not None and time.time() - float(frozen.get("at", 0)) >= frozen_after:
            found.append(
                Problem(
                    VolumeHealth.DEGRADED,
                    "Frozen",
                    f"the filesystem is frozen for a snapshot or clone (since "
                    f"{time.time() - float(frozen.get('at', 0)):.0f}s, pid {frozen.get('pid')}); "
                    "writes wait until it is thawed",
                )
            )
        if device.read_only and not access.effective_readonly(staged.access_mode, False):
            found.append(
                Problem(
                    VolumeHealth.DEGRADED,
                    "DeviceReadOnly",
                    f"{device.path} is read-only, though the volume is read-write",
                )
            )
        if staged.access_type == AccessType.MOUNT and (
            errs := self.system.fs.error_count(device.path)
        ):
            found.append(
                Problem(
                    VolumeHealth.DATA_LOSS,
                    "FilesystemErrors",
                    conditions.io_errors(errs, staged.fs_type, device.path),
                )
            )
        if self.system.pool.free_bytes() == 0:
            found.append(
                Problem(
                    VolumeHealth.DEGRADED, "PoolFull", conditions.pool_full(str(self.layout.root))
                )
            )
        return found, device

    def health(self, volume_id: str, publish_path: str, staging_path: str) -> list[Problem]:
        """NodeGetVolumeHealth: the volume's problems at the path given, else where it is staged
        (a block volume: its first target, if it has one)."""
        path: str | None
        if publish_path or staging_path:
            staged, path = self._staged_at(volume_id, publish_path or staging_path)
        else:
            resolved = self.inline.resolve(volume_id)
            found = self.store.get_staging(resolved) if resolved is not None else None
            if found is None:
                raise VolumeNotFound(f"volume {volume_id[:200]!r} is not staged on this node")
            staged, path = found, found.staging_path
            if staged.access_type == AccessType.BLOCK:
                # A block volume's staging path is no mount: its targets are bind mounts.
                targets = self.store.node_publications(staged.volume_id)
                path = targets[0].target_path if targets else None
        return self._problems(staged, path, self.frozen_after)[0]

    def storage_health(self) -> list[Problem]:
        """NodeGetStorageHealth: the pool as this node sees it."""
        pool = self.system.pool
        writable = pool.writable()
        free = pool.free_bytes() if writable is not None else 0
        return conditions.storage_problems(str(pool.root), writable, free, POOL_RESERVE_BYTES)

    def stats(self, volume_id: str, volume_path: str) -> VolumeStats:
        staged, path = self._staged_at(volume_id, volume_path)
        kind = staged.access_type
        problems, device = self._problems(staged, path, 0.0)
        problem = problems[0].message if problems else ""
        if device is None:
            return VolumeStats(kind, 0, 0, 0, abnormal=True, message=problem)
        if kind == AccessType.BLOCK:
            size = self.system.devices.size(device.path)
            return VolumeStats(kind, size, 0, 0, abnormal=bool(problem), message=problem)
        s: FsStats = self.system.fs.stats(path)
        return VolumeStats(
            kind,
            s.total_bytes,
            s.available_bytes,
            s.used_bytes,
            s.total_inodes,
            s.free_inodes,
            s.used_inodes,
            abnormal=bool(problem),
            message=problem,
        )
