"""Node use-cases: loop devices, filesystems and mounts for the volumes this node uses.

Setup runs: decide → idempotent system step → commit. Teardown runs: system step → commit. The
kernel (mountinfo, loop devices found by tag) is the truth for what is attached and mounted; this
node's store is the truth for what should be. `reconcile` repairs the difference on start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.config import Config, PoolScope
from csi_hostpath.core import access, ledger
from csi_hostpath.core.errors import (
    GenerationRevoked,
    Incompatible,
    InvalidRequest,
    NotStaged,
    PublishedElsewhere,
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
from csi_hostpath.core.naming import is_volume_id, loop_tag, loop_tag_prefix, volume_id_from_tag
from csi_hostpath.service.controller import FS_TYPE_KEY, GENERATION_KEY
from csi_hostpath.service.guard import InFlight
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool import PoolLayout
from csi_hostpath.system.base import FsStats, LoopDevice, System

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


def check_path(path: str, what: str) -> str:
    """CO paths are used as given, but never a relative one or one that climbs with '..'."""
    if not path:
        raise InvalidRequest(f"{what} is required")
    if "\x00" in path or not path.startswith("/") or ".." in path.split("/"):
        raise InvalidRequest(f"{what} must be an absolute path without '..': {path[:200]!r}")
    return os.path.normpath(path)


class NodeService:
    def __init__(self, config: Config, store: Store, system: System, layout: PoolLayout) -> None:
        self.config = config
        self.node_id = config.node_id
        self.store = store
        self.system = system
        self.layout = layout
        self.inflight = InFlight()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----- helpers -----
    def _backing_file(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = self.layout.volume_file(volume_id)
        if not path.exists():
            raise VolumeNotFound(f"volume {volume_id} has no backing file in {self.layout.volumes}")
        return path

    def _generation(self, volume_id: str, publish_context: Mapping[str, str]) -> int:
        """Check the fencing token the CO hands us against the lease the controller wrote."""
        raw = publish_context.get(GENERATION_KEY, "")
        if not raw.isdigit():
            raise GenerationRevoked(
                f"volume {volume_id} is not published to node {self.node_id!r}: the "
                "publish_context carries no fencing generation; call ControllerPublishVolume first"
            )
        generation = int(raw)
        lease = self.layout.read_lease(volume_id)
        if ledger.is_revoked(lease, self.node_id, generation):
            held = lease.holders if lease else {}
            raise GenerationRevoked(
                f"volume {volume_id}: generation {generation} is not held by node "
                f"{self.node_id!r} (the ledger's holders are {held or 'none'}); it was "
                "unpublished or force-detached, so this node must not touch the volume"
            )
        return generation

    def _attach(self, volume_id: str, backing: Path) -> LoopDevice:
        return self.system.loop.attach(backing, loop_tag(self.node_id, volume_id))

    # ----- stage -----
    def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: Capability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
    ) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        staging_path = check_path(staging_path, "staging_target_path")
        access.check_capability(cap)
        with self.inflight.hold(volume_id, "NodeStageVolume"):
            backing = self._backing_file(volume_id)
            generation = self._generation(volume_id, publish_context)
            existing = self.store.get_staging(volume_id)
            if existing is not None and (existing.staging_path, existing.access_type) != (
                staging_path,
                cap.access_type,
            ):
                raise Incompatible(
                    f"volume {volume_id} is already staged at {existing.staging_path} for "
                    f"{existing.access_type.value} access"
                )
            fs_type = ""
            if cap.access_type == AccessType.MOUNT:
                fs_type = (
                    cap.fs_type or volume_context.get(FS_TYPE_KEY, "") or access.DEFAULT_FS_TYPE
                )
                if fs_type not in access.SUPPORTED_FS_TYPES:
                    raise WrongAccessForVolume(f"fs_type {fs_type!r} is not supported")
            device = self._attach(volume_id, backing)
            if cap.access_type == AccessType.MOUNT:
                self._mount_staging(volume_id, device.path, staging_path, fs_type, cap)
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
                )
            )
            log.info(
                "staged %s at %s on %s (%s)",
                volume_id,
                staging_path,
                device.path,
                fs_type or "block",
            )

    def _mount_staging(
        self, volume_id: str, device: str, staging_path: str, fs_type: str, cap: Capability
    ) -> None:
        mounted = self.system.mounts.find(staging_path)
        if mounted is not None:
            if mounted.source == device:
                return
            raise Incompatible(f"{staging_path} already has {mounted.source} mounted on it")
        found = self.system.fs.probe(device)
        if found is None:
            log.info("formatting %s (%s) as %s", volume_id, device, fs_type)
            self.system.fs.mkfs(device, fs_type)
        elif found != fs_type:
            raise WrongAccessForVolume(
                f"volume {volume_id} already holds a {found} filesystem; it can't be staged as "
                f"{fs_type}"
            )
        options = list(cap.mount_flags)
        if cap.access_mode in access.READER_ONLY_MODES:
            options.append("ro")
        if not os.path.isdir(staging_path):
            os.makedirs(staging_path, exist_ok=True)
        self.system.mounts.mount(device, staging_path, fs_type, options)

    def unstage(self, volume_id: str, staging_path: str) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        staging_path = check_path(staging_path, "staging_target_path")
        if not is_volume_id(volume_id):
            return
        with self.inflight.hold(volume_id, "NodeUnstageVolume"):
            record = self.store.get_staging(volume_id)
            mounted = self.system.mounts.find(staging_path)
            tag = loop_tag(self.node_id, volume_id)
            device = self.system.loop.find(tag)
            if mounted is not None and (device is None or mounted.source == device.path):
                self.system.mounts.unmount(staging_path)
            if device is not None:
                self.system.loop.detach(device.path)
            if record is not None:
                self.store.delete_staging(volume_id)
            log.info("unstaged %s from %s", volume_id, staging_path)

    # ----- publish -----
    def publish(
        self,
        volume_id: str,
        staging_path: str,
        target_path: str,
        cap: Capability,
        readonly: bool,
    ) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        target_path = check_path(target_path, "target_path")
        access.check_capability(cap)
        if not staging_path:
            raise NotStaged(
                "staging_target_path is required: this plugin advertises STAGE_UNSTAGE_VOLUME"
            )
        staging_path = check_path(staging_path, "staging_target_path")
        ro = access.effective_readonly(cap.access_mode, readonly)
        with self.inflight.hold(volume_id, "NodePublishVolume"):
            self._backing_file(volume_id)
            staged = self.store.get_staging(volume_id)
            if staged is None or staged.staging_path != staging_path:
                raise NotStaged(f"volume {volume_id} is not staged at {staging_path}")
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
            self._bind_target(volume_id, staged, target_path, ro)
            self.store.save_node_publication(
                NodePublication(
                    volume_id, target_path, ro, cap.access_mode, cap.access_type, cap.mount_flags
                )
            )
            log.info("published %s at %s (%s)", volume_id, target_path, "ro" if ro else "rw")

    def _bind_target(
        self, volume_id: str, staged: NodeStaging, target_path: str, readonly: bool
    ) -> None:
        if self.system.mounts.find(target_path) is not None:
            return
        if staged.access_type == AccessType.MOUNT:
            if self.system.mounts.find(staged.staging_path) is None:
                raise NotStaged(
                    f"volume {volume_id}: nothing is mounted at {staged.staging_path}; stage again"
                )
            os.makedirs(target_path, exist_ok=True)
            self.system.mounts.bind(staged.staging_path, target_path, read_only=readonly)
        else:
            device = self.system.loop.find(loop_tag(self.node_id, volume_id))
            if device is None:
                raise NotStaged(f"volume {volume_id} has no loop device on this node; stage again")
            parent = os.path.dirname(target_path)
            os.makedirs(parent, exist_ok=True)
            if not os.path.exists(target_path):
                with open(target_path, "a"):
                    pass
            self.system.mounts.bind(device.path, target_path, read_only=readonly)

    def unpublish(self, volume_id: str, target_path: str) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        target_path = check_path(target_path, "target_path")
        if not is_volume_id(volume_id):
            return
        with self.inflight.hold(volume_id, "NodeUnpublishVolume"):
            record = self.store.get_node_publication(target_path)
            if record is not None and record.volume_id != volume_id:
                raise Incompatible(f"{target_path} belongs to volume {record.volume_id}")
            self.system.mounts.unmount(target_path)
            self._remove_target(target_path)
            if record is not None:
                self.store.delete_node_publication(target_path)
            log.info("unpublished %s from %s", volume_id, target_path)

    def _remove_target(self, target_path: str) -> None:
        # Only what this plugin created: an empty directory or an empty placeholder file.
        if self.system.mounts.find(target_path) is not None:
            return
        try:
            if os.path.isdir(target_path) and not os.path.islink(target_path):
                os.rmdir(target_path)
            elif os.path.isfile(target_path) and os.path.getsize(target_path) == 0:
                os.unlink(target_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("left %s in place: %s", target_path, e)

    # ----- stats and info -----
    def stats(self, volume_id: str, volume_path: str) -> VolumeStats:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        if not volume_path:
            raise InvalidRequest("volume_path is required")
        if not is_volume_id(volume_id):
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = os.path.normpath(volume_path)
        staged = self.store.get_staging(volume_id)
        targets = {p.target_path: p for p in self.store.node_publications(volume_id)}
        if staged is None or (path != staged.staging_path and path not in targets):
            if not self.layout.volume_file(volume_id).exists():
                raise VolumeNotFound(f"volume {volume_id} does not exist")
            raise VolumeNotFound(f"volume {volume_id} is not staged or published at {volume_path}")
        if not self.layout.volume_file(volume_id).exists():
            return VolumeStats(
                staged.access_type,
                0,
                0,
                0,
                abnormal=True,
                message=f"the backing file of {volume_id} is missing from the pool",
            )
        if self.system.mounts.find(path) is None:
            return VolumeStats(
                staged.access_type,
                0,
                0,
                0,
                abnormal=True,
                message=f"{path} is not mounted; unpublish and publish again",
            )
        if staged.access_type == AccessType.BLOCK:
            device = self.system.loop.find(loop_tag(self.node_id, volume_id))
            size = self.system.devices.size(device.path) if device else 0
            return VolumeStats(AccessType.BLOCK, size, 0, 0)
        s: FsStats = self.system.fs.stats(path)
        return VolumeStats(
            AccessType.MOUNT,
            s.total_bytes,
            s.available_bytes,
            s.used_bytes,
            s.total_inodes,
            s.free_inodes,
            s.used_inodes,
        )

    def accessible_topology(self) -> dict[str, str]:
        if self.config.pool_scope == PoolScope.LOCAL:
            return {self.config.topology_key: self.node_id}
        return {}

    # ----- reconcile and fencing -----
    def reconcile(self) -> None:
        """Repair the kernel to match this node's records; drop what no record claims."""
        self.layout.beat(self.node_id)
        self.fence_revoked()
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
                    self._bind_target(p.volume_id, s2, p.target_path, p.readonly)
                except Exception:
                    log.exception("re-binding %s failed", p.target_path)
        for device in self.system.loop.list(loop_tag_prefix(self.node_id)):
            vid = volume_id_from_tag(device.tag)
            if vid is not None and vid not in stagings:
                self._drop_untracked(vid, device)

    def _repair_staging(self, s: NodeStaging) -> None:
        backing = self.layout.volume_file(s.volume_id)
        if not backing.exists():
            log.warning(
                "volume %s is staged but its backing file is gone; leaving it for NodeUnstage",
                s.volume_id,
            )
            return
        device = self.system.loop.find(loop_tag(self.node_id, s.volume_id))
        if device is None:
            device = self._attach(s.volume_id, backing)
            log.warning("repair: re-attached %s on %s", s.volume_id, device.path)
        if s.access_type == AccessType.MOUNT and self.system.mounts.find(s.staging_path) is None:
            cap = Capability(AccessType.MOUNT, s.access_mode, s.fs_type)
            self._mount_staging(s.volume_id, device.path, s.staging_path, s.fs_type, cap)
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

    def fence_revoked(self) -> list[str]:
        fenced = []
        for s in self.store.stagings():
            if s.generation == 0:
                continue
            lease = self.layout.read_lease(s.volume_id)
            if ledger.is_revoked(lease, self.node_id, s.generation):
                with self.inflight.hold(s.volume_id, "fence"):
                    self._fence(s, lease)
                fenced.append(s.volume_id)
        return fenced

    def _fence(self, s: NodeStaging, lease: ledger.Lease | None) -> None:
        held = lease.holders if lease else {}
        log.warning(
            "FENCING volume %s: this node (%s) staged it under generation %d, but the ledger "
            "now grants it to %s. Cutting off all I/O now.",
            s.volume_id,
            self.node_id,
            s.generation,
            held or "nobody",
        )
        targets = self.store.node_publications(s.volume_id)
        if s.access_type == AccessType.MOUNT and self.system.mounts.find(s.staging_path):
            try:
                self.system.fs.shutdown(s.staging_path)
            except Exception:
                log.exception("filesystem shutdown of %s failed; unmounting anyway", s.staging_path)
        for p in targets:
            self.system.mounts.unmount(p.target_path, lazy=True)
            self._remove_target(p.target_path)
            self.store.delete_node_publication(p.target_path)
        if s.access_type == AccessType.MOUNT:
            self.system.mounts.unmount(s.staging_path, lazy=True)
        device = self.system.loop.find(loop_tag(self.node_id, s.volume_id))
        if device is not None:
            self.system.loop.detach(device.path)
        self.store.delete_staging(s.volume_id)
        self.store.record(
            "node:" + self.node_id,
            "fenced",
            s.volume_id,
            self.node_id,
            s.generation,
            f"ledger holders now {held or 'none'}",
        )
        self.layout.record_event(
            "fenced",
            s.volume_id,
            self.node_id,
            s.generation,
            f"ledger holders now {held or 'none'}",
        )
        if s.access_type == AccessType.BLOCK:
            log.warning(
                "fenced block volume %s: bind mounts removed and loop detached, but a process "
                "that already holds the device open keeps its I/O until it closes it (no "
                "device-mapper here to cut it off)",
                s.volume_id,
            )

    # ----- background loop -----
    def start_background(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)
        self._thread.start()

    def stop_background(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        next_fence = time.monotonic() + self.config.fence_interval
        while not self._stop.wait(min(self.config.heartbeat_interval, self.config.fence_interval)):
            try:
                self.layout.beat(self.node_id)
                if time.monotonic() >= next_fence:
                    next_fence = time.monotonic() + self.config.fence_interval
                    self.fence_revoked()
            except Exception:
                log.exception("heartbeat/fence pass failed; trying again next interval")
