"""Node use-cases: loop devices, filesystems and mounts for the volumes this node uses.

Setup runs: decide → idempotent system step → commit. Teardown runs: system step → commit. The
kernel (mountinfo, loop devices found by tag) is the truth for what is attached and mounted; this
node's store is the truth for what should be. `reconcile` repairs the difference on start.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath.core import access, ledger_rules
from csi_hostpath.core.context_keys import (
    ACCESS_TYPE_KEY,
    EPHEMERAL_KEY,
    FS_TYPE_KEY,
    POD_UID_KEY,
    READONLY_KEY,
)
from csi_hostpath.core.errors import (
    GenerationRevoked,
    Incompatible,
    NotStaged,
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
from csi_hostpath.core.naming import is_volume_id, loop_tag, loop_tag_prefix, node_key
from csi_hostpath.core.volume_limit import NodeInfo, volume_limit
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.adopt import Unclaimed
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.service.node.freeze_server import FreezeServer
from csi_hostpath.service.node.heartbeat import NodeAgent
from csi_hostpath.service.node.inline import InlineVolumes
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts
from csi_hostpath.service.node.paths import DriverDirs, check_path, refuse_overlap
from csi_hostpath.service.node.repair import NodeRepair
from csi_hostpath.service.node.stage_checks import StageChecks
from csi_hostpath.service.node.staged_volumes import StagedVolumes
from csi_hostpath.service.node.staging_fs import check_same_stage
from csi_hostpath.service.node.tuning import NodeTuning
from csi_hostpath.store.mutable_records import MutableRecords


class NodeService:
    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = system = ctx.system
        self.layout = layout = ctx.layout
        self.inflight = ctx.inflight
        # Each job in its own part; NodeService keeps the RPC use-cases and wires them together.
        self.mounts = NodeMounts(ctx)
        self.inline = InlineVolumes(ctx, self.mounts)
        self.unclaimed = Unclaimed()
        self.agent = NodeAgent(ctx, self.mounts, self.unclaimed)
        self.stage_checks = StageChecks(ctx)
        # Freeze records in the pool: they must outlive a lost state directory.
        frozen = layout.root / "frozen" / node_key(self.node_id)
        self.freezes = Freezes(ctx.state_dir, system, ctx.max_freeze_seconds, frozen)
        # Freezes asked for by a controller in another process, through the pool.
        self.freeze_server = FreezeServer(ctx, self.freezes)
        self.repair = NodeRepair(ctx, self.mounts, self.inline, self.agent, self.unclaimed)
        self.tuning = NodeTuning(MutableRecords(layout.root), system.io, ctx.state_dir)
        self.volumes = StagedVolumes(ctx, self.mounts, self.inline, self.freezes)
        # Where the CO's staging and target paths may never resolve to (paths.py).
        self.paths = DriverDirs({"state directory": ctx.state_dir, "pool directory": ctx.pool_dir})

    # ----- the background agent and reconcile, for the server -----
    def reconcile(self) -> None:
        # First: a filesystem a crash left frozen hangs its pod's writes until it is thawed.
        # Before that thaw, a controller's copy under a freeze of the last incarnation is told
        # the freeze broke.
        self.freeze_server.break_previous()
        self.freezes.thaw_recorded()
        self.repair.reconcile()

    def start_background(self) -> None:
        self.agent.start_background(self._after_fence_pass)
        self.freeze_server.start()

    def _after_fence_pass(self) -> None:
        # Reconcile's items that failed at start are retried; one that re-adopts or lets go of
        # an unclaimed device changes what the heartbeat must say.
        unclaimed = self.unclaimed.entries()
        self.repair.retry()
        if unclaimed != self.unclaimed.entries():
            self.agent.beat()
        # Write errors appear between RPCs; changed mutable parameters apply to staged volumes.
        self.agent.report_io_errors()
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

    # ----- stage -----
    def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: Capability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
    ) -> None:
        staging_path = self.paths.judged(staging_path, "staging_target_path")
        access.check_capability(cap)
        with self.inflight.hold(volume_id, "NodeStageVolume"):
            backing = self._backing_file(volume_id)
            generation = self.stage_checks.granted_generation(volume_id, publish_context)
            granted = publish_context.get(ACCESS_TYPE_KEY, cap.access_type.value)
            if granted != cap.access_type.value:
                # Staging a block grant as a filesystem would run mkfs over the block data.
                raise WrongAccessForVolume(
                    f"volume {volume_id} was published to this node for {granted[:20]} access, "
                    f"not {cap.access_type.value}; publish it again with the capability to stage"
                )
            if cap.access_mode in access.SINGLE_NODE_MODES:
                self.stage_checks.check_no_other_live_stager(volume_id)
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
                check_same_stage(self.system, existing, cap, fs_type)
            if cap.access_type == AccessType.MOUNT:
                self.mounts.check_target(staging_path, "staging_target_path", "dir")
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
                    self.system.loop.detach(device)
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
        target_path = self.paths.judged(target_path, "target_path")
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
        refuse_overlap(target_path, staging_path)
        with self.inflight.hold(volume_id, "NodePublishVolume"):
            self._backing_file(volume_id)
            staged = self.store.get_staging(volume_id)
            if staged is None or staged.staging_path != staging_path:
                raise NotStaged(f"volume {volume_id} is not staged at {staging_path}")
            lease = self.layout.read_lease(volume_id)
            if staged.generation and ledger_rules.is_revoked(
                lease, self.node_id, staged.generation
            ):
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
        resolved = self.inline.resolve(volume_id)
        if resolved is None:
            return  # never ours, or an inline volume already gone
        with self.inflight.hold(resolved, "NodeUnpublishVolume"):
            record = self.store.get_node_publication(target_path)
            if record is not None and record.volume_id != resolved:
                raise Incompatible(f"{target_path} belongs to volume {record.volume_id}")
            with self._reported_if_busy(resolved):
                there = self.mounts.take_down_target(
                    resolved, target_path, recorded=record is not None
                )
            if not there:
                # Nothing of this volume's is there: leave whatever is (the spec's answer is OK).
                return
            device = self.system.loop.find(loop_tag(self.node_id, resolved))
            if record is not None:
                self.store.delete_node_publication(target_path)
            self.tuning.unpublished(resolved, device.path if device else None, target_path)
            self.agent.volume_changed(resolved)
            log.info("unpublished %s from %s", volume_id, target_path)
            self.inline.delete_if_unpublished(volume_id, resolved)

    # ----- NodeGetInfo -----
    def node_info(self) -> NodeInfo:
        census = self.system.loop.census(loop_tag_prefix(self.node_id))
        limit, counted = volume_limit(census, self.ctx.max_volumes_per_node)
        log.debug("volume limit %d: %s", limit, counted)
        return NodeInfo(self.node_id, limit, dict(self.ctx.topology))
