"""Node use-cases: loop devices, filesystems and mounts for the volumes this node uses.

Setup runs: decide → idempotent system step → commit. Teardown runs: system step → commit. The
kernel (mountinfo, loop devices found by tag) is the truth for what is attached and mounted; this
node's store is the truth for what should be. `reconcile` repairs the difference on start.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.config import Config, PoolScope
from csi_hostpath.core import access, conditions, ledger
from csi_hostpath.core.context_keys import (
    ACCESS_TYPE_KEY,
    EPHEMERAL_KEY,
    FS_TYPE_KEY,
    GENERATION_KEY,
    POD_UID_KEY,
    READONLY_KEY,
)
from csi_hostpath.core.errors import (
    Busy,
    CapacityOutOfRange,
    GenerationRevoked,
    Incompatible,
    NotStaged,
    OnlineResizeUnavailable,
    PublishedElsewhere,
    TargetBusy,
    VolumeNotFound,
    WrongAccessForVolume,
)
from csi_hostpath.core.model import (
    AccessMode,
    AccessType,
    Capability,
    NodePublication,
    NodeStaging,
)
from csi_hostpath.core.naming import is_volume_id, loop_tag, node_key
from csi_hostpath.service.guard import InFlight
from csi_hostpath.service.node_agent import NodeAgent
from csi_hostpath.service.node_ephemeral import InlineVolumes, ephemeral_volume_id
from csi_hostpath.service.node_freeze import Freezes
from csi_hostpath.service.node_freeze_remote import FreezeServer
from csi_hostpath.service.node_mounts import NodeMounts
from csi_hostpath.service.node_paths import DriverDirs, check_path, mounted_at
from csi_hostpath.service.node_repair import NodeRepair
from csi_hostpath.service.node_tuning import NodeTuning
from csi_hostpath.store.db import Store
from csi_hostpath.store.freeze_channel import FreezeChannel
from csi_hostpath.store.mutable import MutableRecords
from csi_hostpath.store.pool import PoolLayout
from csi_hostpath.system.base import FsStats, NotPermitted, System

log = logging.getLogger(__name__)


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


_TOKEN = re.compile(r"[0-9]{1,18}")


class NodeService:
    def __init__(self, config: Config, store: Store, system: System, layout: PoolLayout) -> None:
        self.config = config
        self.node_id = config.node_id
        self.store = store
        self.system = system
        self.layout = layout
        self.inflight = InFlight()
        # Each job in its own part; NodeService keeps the RPC use-cases and wires them together.
        self.mounts = NodeMounts(
            self.node_id, store, system, layout, config.state_dir / "ephemeral"
        )
        self.inline = InlineVolumes(config, store, system, self.mounts, self.inflight)
        self.agent = NodeAgent(config, store, system, layout, self.mounts, self.inflight)
        # Freeze records in the pool: they must outlive a lost state directory.
        frozen = layout.root / "frozen" / node_key(self.node_id)
        self.freezes = Freezes(config.state_dir, system, config.max_freeze_seconds, frozen)
        # Freezes asked for by a controller in another process, through the pool.
        self.freeze_server = FreezeServer(
            self.node_id, store, system, FreezeChannel(layout.root), self.freezes, self.inflight
        )
        self.repair = NodeRepair(
            self.node_id, store, system, layout, self.mounts, self.inline, self.agent
        )
        self.tuning = NodeTuning(MutableRecords(layout.root), system.io, config.state_dir)
        self.agent.fence_pass_hooks.append(self._retune)
        # Where the CO's staging and target paths may never resolve to (node_paths.py).
        self.paths = DriverDirs(
            {"state directory": config.state_dir, "pool directory": config.pool_dir}
        )

    @property
    def ephemeral_dir(self) -> Path:
        return self.mounts.ephemeral_dir

    # ----- the background agent and reconcile, for the server -----
    def beat(self) -> None:
        self.agent.beat()

    def fence_revoked(self) -> list[str]:
        return self.agent.fence_revoked()

    def reconcile(self) -> None:
        # First: a filesystem a crash left frozen hangs its pod's writes until it is thawed.
        # Before that thaw, a controller's copy under a freeze of the last incarnation is told
        # the freeze broke.
        self.freeze_server.break_previous()
        self.freezes.thaw_recorded()
        self.repair.reconcile()

    def start_background(self) -> None:
        self.agent.start_background()
        self.freeze_server.start()

    def _retune(self) -> None:
        self.tuning.refresh({s.volume_id: s.device for s in self.store.stagings()})

    def stop_background(self) -> None:
        self.freeze_server.stop()
        self.agent.stop_background()

    # ----- helpers -----
    def _backing_file(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = self.layout.volume_file(volume_id)
        if not path.exists():
            raise VolumeNotFound(f"volume {volume_id} has no backing file in {self.layout.volumes}")
        return path

    def _resolve(self, volume_id: str) -> str | None:
        """Our volume ID for a CO-given one: itself, or the ID of an inline ephemeral volume."""
        if is_volume_id(volume_id):
            return volume_id
        if len(volume_id.encode()) > 1024 or "\x00" in volume_id:
            return None
        internal = ephemeral_volume_id(self.node_id, volume_id)
        staged = self.store.get_staging(internal)
        if staged is not None and self.mounts.is_ephemeral(staged.staging_path):
            return internal
        return None

    @contextmanager
    def frozen(self, volume_id: str) -> Iterator[None]:
        """Hold the volume's filesystem frozen (if it is mounted here) so a copy of its backing
        file is consistent: every write acknowledged before the freeze is in the copy."""
        staged = self.store.get_staging(volume_id)
        if (
            staged is None
            or staged.access_type != AccessType.MOUNT
            or self.system.mounts.find(staged.staging_path) is None
        ):
            yield
            return
        with (
            self.inflight.hold(volume_id, "snapshot freeze"),
            self.freezes.hold(volume_id, staged.staging_path),
        ):
            yield

    def _generation(self, volume_id: str, publish_context: Mapping[str, str]) -> int:
        """Check the fencing token the CO hands us against the lease the controller wrote."""
        raw = publish_context.get(GENERATION_KEY, "")
        if not _TOKEN.fullmatch(raw):
            raise GenerationRevoked(
                f"volume {volume_id} is not published to node {self.node_id!r}: the "
                "publish_context carries no fencing generation; call ControllerPublishVolume first"
            )
        generation = int(raw)
        lease = self.layout.read_lease(volume_id)
        if not ledger.grants(lease, self.node_id, generation):
            held = lease.holders if lease else {}
            raise GenerationRevoked(
                f"volume {volume_id}: generation {generation} is not held by node "
                f"{self.node_id!r} (the ledger's holders are {held or 'none'}); it was "
                "unpublished or force-detached, so this node must not touch the volume"
            )
        return generation

    # ----- stage -----
    def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: Capability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
    ) -> None:
        staging_path = self.paths.guard(staging_path, "staging_target_path")
        access.check_capability(cap)
        with self.inflight.hold(volume_id, "NodeStageVolume"):
            backing = self._backing_file(volume_id)
            generation = self._generation(volume_id, publish_context)
            granted = publish_context.get(ACCESS_TYPE_KEY, cap.access_type.value)
            if granted != cap.access_type.value:
                # Staging a block grant as a filesystem would run mkfs over the block data.
                raise WrongAccessForVolume(
                    f"volume {volume_id} was published to this node for {granted[:20]} access, "
                    f"not {cap.access_type.value}; publish it again with the capability to stage"
                )
            if cap.access_mode in access.SINGLE_NODE_MODES:
                self._check_no_other_live_stager(volume_id)
            existing = self.store.get_staging(volume_id)
            if existing is not None and (
                existing.staging_path,
                existing.access_type,
                existing.access_mode,
            ) != (staging_path, cap.access_type, cap.access_mode):
                raise Incompatible(
                    f"volume {volume_id} is already staged at {existing.staging_path} for "
                    f"{existing.access_type.value} access as {existing.access_mode.name}"
                )
            fs_type = ""
            if cap.access_type == AccessType.MOUNT:
                fs_type = (
                    cap.fs_type or volume_context.get(FS_TYPE_KEY, "") or access.DEFAULT_FS_TYPE
                )
                if fs_type not in access.SUPPORTED_FS_TYPES:
                    raise WrongAccessForVolume(f"fs_type {fs_type!r} is not supported")
            if existing is not None:
                self._check_same_stage(existing, cap, fs_type)
            if cap.access_type == AccessType.MOUNT:
                self.mounts.prepare_dir(staging_path, "staging_target_path")
            # A reader's stage gets a read-only loop device: a read-only bind of a block device
            # still opens for writing, and a read-only ext4 mount still replays its journal.
            readonly = publish_context.get(READONLY_KEY) == "true" or (
                cap.access_mode in access.READER_ONLY_MODES
            )
            fresh = self.system.loop.find(loop_tag(self.node_id, volume_id)) is None
            device = self.mounts.attach(volume_id, backing, read_only=readonly)
            try:
                if cap.access_type == AccessType.MOUNT:
                    self.mounts.mount_staging(
                        volume_id, device.path, staging_path, fs_type, cap, read_only=readonly
                    )
            except BaseException:
                if fresh:  # leave the kernel as this call found it
                    self.system.loop.detach(device.path)
                raise
            self.store.save_staging(
                NodeStaging(
                    volume_id,
                    staging_path,
                    cap.access_type,
                    cap.access_mode,
                    fs_type,
                    device.path,
                    generation,
                    time.time(),
                    readonly,
                )
            )
            self.tuning.apply(volume_id, device.path)
            self.agent.volume_changed(volume_id)
            log.info(
                "staged %s at %s on %s (%s)",
                volume_id,
                staging_path,
                device.path,
                fs_type or "block",
            )

    def _check_same_stage(self, existing: NodeStaging, cap: Capability, fs_type: str) -> None:
        """A repeated NodeStage must ask for what is staged; other flags are ALREADY_EXISTS."""
        problems = []
        if fs_type != existing.fs_type:
            problems.append(f"as {existing.fs_type or 'block'}, not {fs_type or 'block'}")
        mounted = self.system.mounts.find(existing.staging_path)
        if cap.access_type == AccessType.MOUNT and mounted is not None:
            have, want = access.vfs_flags(mounted.options), access.vfs_flags(cap.mount_flags)
            if have != want:
                problems.append(f"with mount flags {sorted(have)}, not {sorted(want)}")
        if problems:
            raise Incompatible(
                f"volume {existing.volume_id} is already staged at {existing.staging_path} "
                f"{' and '.join(problems)}; unstage it before staging it differently"
            )

    def _check_no_other_live_stager(self, volume_id: str) -> None:
        """The ledger moved the volume here, but the node it came from may still be alive and
        mounted: Kubernetes unpublishes a node it can't reach after a timeout, and a forced
        detach can be taken against a live node. Until that node reports the volume gone (it
        fences itself within its fence interval) or falls silent past the grace period, staging
        here would put two writers on one filesystem."""
        for beat in self.layout.heartbeats(volume_id):
            if beat.node_id == self.node_id or volume_id not in beat.volumes:
                continue
            age = beat.age()
            if age < self.config.node_grace:
                raise Busy(
                    f"volume {volume_id} is still staged on node {beat.node_id!r} (its heartbeat "
                    f"{age:.0f}s ago says so); it unstages or fences itself first, or goes silent "
                    f"for {self.config.node_grace:.0f}s. Retrying is safe"
                )

    def unstage(self, volume_id: str, staging_path: str) -> None:
        staging_path = check_path(staging_path, "staging_target_path")
        if not is_volume_id(volume_id):
            return
        with self.inflight.hold(volume_id, "NodeUnstageVolume"):
            record = self.store.get_staging(volume_id)
            if record is not None and record.staging_path != staging_path:
                # Not staged there: the spec's answer is OK, and the real staging stays.
                log.info(
                    "%s is staged at %s, not %s: nothing to unstage there",
                    volume_id,
                    record.staging_path,
                    staging_path,
                )
                return
            self.tuning.cleared(volume_id, record.device if record else None)
            with self._reported_if_busy(volume_id):
                self.mounts.teardown(volume_id, staging_path)
            # Written now, not soon: another node may be waiting to stage this volume.
            self.agent.volume_changed(volume_id)
            log.info("unstaged %s from %s", volume_id, staging_path)

    # ----- publish -----
    def publish(
        self,
        volume_id: str,
        staging_path: str,
        target_path: str,
        cap: Capability,
        readonly: bool,
        volume_context: Mapping[str, str] | None = None,
    ) -> None:
        target_path = self.paths.guard(target_path, "target_path")
        access.check_capability(cap)
        if (volume_context or {}).get(EPHEMERAL_KEY) == "true":
            self.inline.publish(
                volume_id, target_path, cap, readonly, volume_context or {}, self._publish_staged
            )
            return
        if not staging_path:
            raise NotStaged(
                "staging_target_path is required: this plugin advertises STAGE_UNSTAGE_VOLUME"
            )
        staging_path = check_path(staging_path, "staging_target_path")
        with self.inflight.hold(volume_id, "NodePublishVolume"):
            self._backing_file(volume_id)
            staged = self.store.get_staging(volume_id)
            if staged is None or staged.staging_path != staging_path:
                raise NotStaged(f"volume {volume_id} is not staged at {staging_path}")
            lease = self.layout.read_lease(volume_id)
            if staged.generation and ledger.is_revoked(lease, self.node_id, staged.generation):
                # The fence pass would cut it off within seconds; never bind a new target first.
                raise GenerationRevoked(
                    f"volume {volume_id}: this node's grant (generation {staged.generation}) was "
                    f"revoked (the ledger's holders are {lease.holders if lease else 'none'}); "
                    "it was unpublished or force-detached, so no new target is bound"
                )
            self._publish_staged(volume_id, staged, target_path, cap, readonly)
            pod_uid = (volume_context or {}).get(POD_UID_KEY, "")
            self.tuning.published(volume_id, staged.device, target_path, pod_uid)

    def _publish_staged(
        self,
        volume_id: str,
        staged: NodeStaging,
        target_path: str,
        cap: Capability,
        readonly: bool,
    ) -> None:
        ro = access.effective_readonly(cap.access_mode, readonly)
        if staged.access_type != cap.access_type:
            raise WrongAccessForVolume(
                f"volume {volume_id} is staged for {staged.access_type.value} access, not "
                f"{cap.access_type.value}"
            )
        existing = self.store.get_node_publication(target_path)
        if existing is not None:
            same = (
                existing.volume_id,
                existing.readonly,
                existing.access_mode,
                existing.access_type,
                existing.mount_flags,
            ) == (volume_id, ro, cap.access_mode, cap.access_type, cap.mount_flags)
            if not same:
                raise Incompatible(
                    f"{target_path} is already published for {existing.volume_id} with "
                    f"{'ro' if existing.readonly else 'rw'} {existing.access_mode.name}"
                )
        others = [
            p for p in self.store.node_publications(volume_id) if p.target_path != target_path
        ]
        if others and AccessMode.SINGLE_NODE_SINGLE_WRITER in (
            cap.access_mode,
            *(p.access_mode for p in others),
        ):
            raise PublishedElsewhere(
                f"volume {volume_id} is SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod) and is "
                f"already published at {others[0].target_path}"
            )
        self.mounts.bind_target(volume_id, staged, target_path, ro)
        self.store.save_node_publication(
            NodePublication(
                volume_id, target_path, ro, cap.access_mode, cap.access_type, cap.mount_flags
            )
        )
        self.agent.volume_changed(volume_id)
        log.info("published %s at %s (%s)", volume_id, target_path, "ro" if ro else "rw")

    @contextmanager
    def _reported_if_busy(self, volume_id: str) -> Iterator[None]:
        # The timer only touches the node's record: a busy path reaches inspect (who holds it)
        # through this volume's heartbeat entry, written as the call fails.
        try:
            yield
        except TargetBusy:
            self.agent.volume_changed(volume_id)
            raise

    def unpublish(self, volume_id: str, target_path: str) -> None:
        target_path = check_path(target_path, "target_path")
        resolved = self._resolve(volume_id)
        if resolved is None:
            return  # never ours, or an inline volume already gone
        with self.inflight.hold(resolved, "NodeUnpublishVolume"):
            record = self.store.get_node_publication(target_path)
            if record is not None and record.volume_id != resolved:
                raise Incompatible(f"{target_path} belongs to volume {record.volume_id}")
            mounted = mounted_at(self.system, target_path)
            device = self.system.loop.find(loop_tag(self.node_id, resolved))
            if record is None and (mounted is None or not self.mounts.is_ours(mounted, device)):
                # Nothing of this volume's is there: leave whatever is (the spec's answer is OK).
                return
            if mounted is not None:
                with self._reported_if_busy(resolved):
                    self.mounts.unmount(target_path)
            self.mounts.remove_target(target_path)
            if record is not None:
                self.store.delete_node_publication(target_path)
            self.tuning.unpublished(resolved, device.path if device else None, target_path)
            self.agent.volume_changed(resolved)
            log.info("unpublished %s from %s", volume_id, target_path)
            staged = self.store.get_staging(resolved)
            if (
                staged is not None
                and self.mounts.is_ephemeral(staged.staging_path)
                and not self.store.node_publications(resolved)
            ):
                self.mounts.teardown(staged.volume_id, staged.staging_path)
                self.system.pool.remove(self.mounts.backing_for(staged))
                log.info("deleted inline ephemeral volume %s (%s)", volume_id, resolved)

    # ----- expansion -----
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
                raise CapacityOutOfRange(
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

    # ----- stats and info -----
    def _staged_at(self, volume_id: str, volume_path: str) -> tuple[NodeStaging, str]:
        """The staging record of a volume published or staged at volume_path, or NOT_FOUND."""
        resolved = self._resolve(volume_id)
        if resolved is None:
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = os.path.normpath(volume_path)
        staged = self.store.get_staging(resolved)
        targets = {p.target_path for p in self.store.node_publications(resolved)}
        if staged is None or (path != staged.staging_path and path not in targets):
            raise VolumeNotFound(f"volume {volume_id} is not staged or published at {volume_path}")
        return staged, path

    def stats(self, volume_id: str, volume_path: str) -> VolumeStats:
        staged, path = self._staged_at(volume_id, volume_path)
        kind = staged.access_type
        if not self.mounts.backing_for(staged).exists():
            return VolumeStats(
                kind, 0, 0, 0, abnormal=True,
                message=f"the backing file of {volume_id} is missing from the pool: its data "
                "is gone unless a snapshot exists",
            )  # fmt: skip
        if self.system.mounts.find(path) is None:
            return VolumeStats(
                kind, 0, 0, 0, abnormal=True,
                message=f"{path} is not mounted any more; unpublish and publish it again",
            )  # fmt: skip
        device = self.system.loop.find(loop_tag(self.node_id, staged.volume_id))
        if device is None:
            return VolumeStats(
                kind, 0, 0, 0, abnormal=True,
                message=f"volume {volume_id} has no loop device on this node; stage it again",
            )  # fmt: skip
        problem = ""
        if (frozen := self.freezes.recorded(staged.volume_id)) is not None:
            problem = (
                f"the filesystem is frozen for a snapshot or clone (since "
                f"{time.time() - float(frozen.get('at', 0)):.0f}s, pid {frozen.get('pid')}); "
                "writes wait until it is thawed"
            )
        elif device.read_only and not access.effective_readonly(staged.access_mode, False):
            problem = f"{device.path} is read-only, though the volume is read-write"
        elif kind == AccessType.MOUNT and (errs := self.system.fs.error_count(device.path)):
            problem = conditions.io_errors(errs, staged.fs_type, device.path)
        elif self.system.pool.free_bytes() == 0:
            problem = conditions.pool_full(str(self.layout.root))
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

    def accessible_topology(self) -> dict[str, str]:
        if self.config.pool_scope == PoolScope.LOCAL:
            return {self.config.topology_key: self.node_id}
        return {}
