"""Node use-cases: loop devices, filesystems and mounts for the volumes this node uses.

Setup runs: decide → idempotent system step → commit. Teardown runs: system step → commit. The
kernel (mountinfo, loop devices found by tag) is the truth for what is attached and mounted; this
node's store is the truth for what should be. `reconcile` repairs the difference on start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.config import Config, PoolScope
from csi_hostpath.core import access, ledger
from csi_hostpath.core.errors import (
    Busy,
    CapacityOutOfRange,
    GenerationRevoked,
    Incompatible,
    InvalidRequest,
    NoCapacity,
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
from csi_hostpath.core.naming import is_volume_id, loop_tag, loop_tag_prefix, volume_id_from_tag
from csi_hostpath.service.controller import FS_TYPE_KEY, GENERATION_KEY, READONLY_KEY
from csi_hostpath.service.guard import InFlight
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool import PoolLayout
from csi_hostpath.system.base import CommandError, FsStats, LoopDevice, MountEntry, System

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


EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
_TOKEN = re.compile(r"[0-9]{1,18}")
EPHEMERAL_DEFAULT_SIZE = 100 * access.MiB
_SIZE = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|K|M|G|T)?")
_UNITS = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}
# A grown device and its filesystem may differ by less than this without a grow: filesystems
# round their size down to whole blocks and allocation groups.
GROW_SLACK = 1 * access.MiB


def parse_size(text: str) -> int:
    """Kubernetes quantities as volume attributes use them: "100Mi", "1Gi", "5000000"."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidRequest(f"size {text[:40]!r} is not a quantity like 100Mi or 1Gi")
    return int(match.group(1)) * _UNITS[match.group(2)]


def ephemeral_volume_id(node_id: str, kubelet_volume_id: str) -> str:
    """Kubelet names inline ephemeral volumes itself ("csi-<hash>"); the driver keys them by an
    ID of its own pattern, derived so that NodeUnpublish finds the same one."""
    digest = hashlib.sha256(f"{node_id}\0{kubelet_volume_id}".encode()).hexdigest()
    return f"vol-{digest[:32]}"


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
        # Node RPCs ask for a heartbeat (so inspect sees a stage at once) without paying for the
        # file write themselves; the background thread writes it, coalescing bursts.
        self._beat_soon = threading.Event()
        self._thread: threading.Thread | None = None
        # Inline ephemeral volumes belong to this node alone, so they live in its state
        # directory, where no controller's reconcile can mistake them for orphans.
        self.ephemeral_dir = config.state_dir / "ephemeral"

    # ----- helpers -----
    def beat(self) -> None:
        """Heartbeat, carrying what this node has staged and published (for operators)."""
        targets: dict[str, list[str]] = {}
        for p in self.store.node_publications():
            targets.setdefault(p.volume_id, []).append(p.target_path)
        volumes = {
            s.volume_id: {
                "staging": s.staging_path,
                "device": s.device,
                "access_type": s.access_type.value,
                "generation": s.generation,
                "targets": sorted(targets.get(s.volume_id, [])),
            }
            for s in self.store.stagings()
        }
        self.layout.beat(self.node_id, volumes)

    def _backing_file(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise VolumeNotFound(f"volume {volume_id[:200]!r} does not exist")
        path = self.layout.volume_file(volume_id)
        if not path.exists():
            raise VolumeNotFound(f"volume {volume_id} has no backing file in {self.layout.volumes}")
        return path

    def _is_ephemeral(self, staging_path: str) -> bool:
        return staging_path.startswith(str(self.ephemeral_dir) + "/")

    def _backing_for(self, s: NodeStaging) -> Path:
        if self._is_ephemeral(s.staging_path):
            return self.ephemeral_dir / f"{s.volume_id}.img"
        return self.layout.volume_file(s.volume_id)

    def _resolve(self, volume_id: str) -> str | None:
        """Our volume ID for a CO-given one: itself, or the ID of an inline ephemeral volume."""
        if is_volume_id(volume_id):
            return volume_id
        if len(volume_id.encode()) > 1024 or "\x00" in volume_id:
            return None
        internal = ephemeral_volume_id(self.node_id, volume_id)
        staged = self.store.get_staging(internal)
        return internal if staged is not None and self._is_ephemeral(staged.staging_path) else None

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
        with self.inflight.hold(volume_id, "snapshot freeze"):
            self.system.fs.freeze(staged.staging_path)
            try:
                yield
            finally:
                self.system.fs.thaw(staged.staging_path)

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

    @staticmethod
    def _is_ours(entry: MountEntry, device: LoopDevice | None) -> bool:
        """Is this mount the volume's own: its filesystem (a bind shows the same source device)
        or, for a block volume, a bind of its device node (devtmpfs, root /loopN)?"""
        if device is None:
            return False
        return entry.source == device.path or entry.root == f"/{os.path.basename(device.path)}"

    def _unmount(self, path: str, *, lazy: bool = False) -> None:
        try:
            self.system.mounts.unmount(path, lazy=lazy)
        except CommandError as e:
            if "busy" in e.stderr:
                raise TargetBusy(
                    f"{path} is busy: a process has files or its working directory in it, or "
                    "another mount sits beneath it; retry once it is released"
                ) from e
            raise

    @staticmethod
    def _prepare_dir(path: str, what: str) -> None:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise InvalidRequest(f"{what} {path} exists and is not a directory")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise InvalidRequest(f"{what} {path} can't be created: {e.strerror}") from e

    @staticmethod
    def _prepare_file(path: str, what: str) -> None:
        if os.path.isdir(path):
            raise InvalidRequest(f"{what} {path} is a directory; a block volume needs a file")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                with open(path, "a"):
                    pass
        except OSError as e:
            raise InvalidRequest(f"{what} {path} can't be created: {e.strerror}") from e

    def _attach(self, volume_id: str, backing: Path, *, read_only: bool = False) -> LoopDevice:
        device = self.system.loop.attach(
            backing, loop_tag(self.node_id, volume_id), read_only=read_only
        )
        if device.size_bytes < (self.system.pool.size(backing) or 0):
            # Attached before the backing file grew: make the device see the new size.
            self.system.loop.refresh_capacity(device.path)
        return device

    # ----- stage -----
    def _outside_state(self, path: str, what: str) -> str:
        """The CO's paths never lie inside the driver's own state directory (where inline
        volumes and the store live)."""
        state = str(self.config.state_dir).rstrip("/") + "/"
        if path.startswith(state) or path == state.rstrip("/"):
            raise InvalidRequest(f"{what} {path} is inside the driver's state directory")
        return path

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
        staging_path = self._outside_state(
            check_path(staging_path, "staging_target_path"), "staging_target_path"
        )
        access.check_capability(cap)
        with self.inflight.hold(volume_id, "NodeStageVolume"):
            backing = self._backing_file(volume_id)
            generation = self._generation(volume_id, publish_context)
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
            if cap.access_type == AccessType.MOUNT:
                self._prepare_dir(staging_path, "staging_target_path")
            # A reader's stage gets a read-only loop device: a read-only bind of a block device
            # still opens for writing, and a read-only ext4 mount still replays its journal.
            readonly = publish_context.get(READONLY_KEY) == "true" or (
                cap.access_mode in access.READER_ONLY_MODES
            )
            fresh = self.system.loop.find(loop_tag(self.node_id, volume_id)) is None
            device = self._attach(volume_id, backing, read_only=readonly)
            try:
                if cap.access_type == AccessType.MOUNT:
                    self._mount_staging(
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
            self._beat_soon.set()
            log.info(
                "staged %s at %s on %s (%s)",
                volume_id,
                staging_path,
                device.path,
                fs_type or "block",
            )

    def _check_no_other_live_stager(self, volume_id: str) -> None:
        """The ledger moved the volume here, but the node it came from may still be alive and
        mounted: Kubernetes unpublishes a node it can't reach after a timeout, and a forced
        detach can be taken against a live node. Until that node reports the volume gone (it
        fences itself within its fence interval) or falls silent past the grace period, staging
        here would put two writers on one filesystem."""
        for beat in self.layout.heartbeats():
            if beat.node_id == self.node_id or volume_id not in beat.volumes:
                continue
            age = beat.age()
            if age < self.config.node_grace:
                raise Busy(
                    f"volume {volume_id} is still staged on node {beat.node_id!r} (its heartbeat "
                    f"{age:.0f}s ago says so); it unstages or fences itself first, or goes silent "
                    f"for {self.config.node_grace:.0f}s. Retrying is safe"
                )

    def _mount_staging(
        self,
        volume_id: str,
        device: str,
        staging_path: str,
        fs_type: str,
        cap: Capability,
        *,
        read_only: bool = False,
    ) -> None:
        mounted = self.system.mounts.find(staging_path)
        if mounted is not None:
            if mounted.source == device:
                return
            raise Incompatible(f"{staging_path} already has {mounted.source} mounted on it")
        found = self.system.fs.probe(device)
        grow = False
        if found is None:
            if read_only:
                raise WrongAccessForVolume(
                    f"volume {volume_id} holds no filesystem yet, and a read-only stage can't "
                    "make one: a writer must stage it first, or restore it from a snapshot"
                )
            log.info("formatting %s (%s) as %s", volume_id, device, fs_type)
            self.system.fs.mkfs(device, fs_type)
        elif found != fs_type:
            raise WrongAccessForVolume(
                f"volume {volume_id} already holds a {found} filesystem; it can't be staged as "
                f"{fs_type}"
            )
        else:
            # Restored into a larger volume, or expanded while unstaged: grow to the device.
            fs_size = self.system.fs.size(device) or 0
            grow = self.system.devices.size(device) - fs_size >= GROW_SLACK
            if grow and fs_type == "ext4":
                log.info("growing the ext4 of %s to its device before mounting", volume_id)
                self.system.fs.grow_offline(device, fs_type)
                grow = False
        options = list(cap.mount_flags)
        if cap.access_mode in access.READER_ONLY_MODES or read_only:
            options.append("ro")
        if fs_type == "xfs" and "nouuid" not in options:
            # A clone or restore carries its source's xfs UUID, and the kernel refuses a second
            # mount of one UUID, even in another node plugin's mount namespace on this kernel.
            options.append("nouuid")
        self._prepare_dir(staging_path, "staging_target_path")
        try:
            self.system.mounts.mount(device, staging_path, fs_type, options)
        except CommandError as e:
            if cap.mount_flags and self._mounts_without(device, staging_path, fs_type):
                raise InvalidRequest(
                    f"the kernel refused the mount flags {list(cap.mount_flags)} for "
                    f"{fs_type}: {e.stderr.strip()[:300]}"
                ) from e
            raise
        if grow:
            log.info("growing the %s of %s to its device", fs_type, volume_id)
            self.system.fs.grow(device, staging_path, fs_type)

    def _mounts_without(self, device: str, staging_path: str, fs_type: str) -> bool:
        """Does the device mount without the CO's flags? Then the flags were the problem."""
        try:
            self.system.mounts.mount(
                device, staging_path, fs_type, ["ro", "nouuid"] if fs_type == "xfs" else ["ro"]
            )
        except CommandError:
            return False
        self.system.mounts.unmount(staging_path)
        return True

    def unstage(self, volume_id: str, staging_path: str) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
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
            self._teardown(volume_id, staging_path)
            # Written now, not soon: another node may be waiting to stage this volume.
            self.beat()
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
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        target_path = self._outside_state(check_path(target_path, "target_path"), "target_path")
        access.check_capability(cap)
        if (volume_context or {}).get(EPHEMERAL_KEY) == "true":
            self._publish_ephemeral(volume_id, target_path, cap, readonly, volume_context or {})
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
            self._publish_staged(volume_id, staged, target_path, cap, readonly)

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
        self._bind_target(volume_id, staged, target_path, ro)
        self.store.save_node_publication(
            NodePublication(
                volume_id, target_path, ro, cap.access_mode, cap.access_type, cap.mount_flags
            )
        )
        self._beat_soon.set()
        log.info("published %s at %s (%s)", volume_id, target_path, "ro" if ro else "rw")

    def _publish_ephemeral(
        self,
        kubelet_volume_id: str,
        target_path: str,
        cap: Capability,
        readonly: bool,
        volume_context: Mapping[str, str],
    ) -> None:
        """An inline ephemeral volume lives and dies with its pod: create, format and mount it
        here, with no controller and no ledger (it is never shared)."""
        if cap.access_type != AccessType.MOUNT:
            raise InvalidRequest("inline ephemeral volumes are filesystem volumes only")
        if len(kubelet_volume_id.encode()) > 1024 or "\x00" in kubelet_volume_id:
            raise InvalidRequest("volume_id is not a valid inline volume name")
        volume_id = ephemeral_volume_id(self.node_id, kubelet_volume_id)
        fs_type = cap.fs_type or volume_context.get("fsType", "") or access.DEFAULT_FS_TYPE
        if fs_type not in access.SUPPORTED_FS_TYPES:
            raise InvalidRequest(f"fs_type {fs_type!r} is not supported")
        wanted = volume_context.get("size", "")
        size = parse_size(wanted) if wanted else EPHEMERAL_DEFAULT_SIZE
        size = access.round_capacity(size, 0, fs_type, self.config.max_volume_size)
        free = self.system.pool.free_bytes()
        if size > free:
            # Judged against the pool's filesystem, which the state directory usually shares.
            raise NoCapacity(f"an inline volume of {size} bytes can't fit: {free} bytes free")
        with self.inflight.hold(volume_id, "NodePublishVolume (ephemeral)"):
            self.ephemeral_dir.mkdir(parents=True, exist_ok=True)
            backing = self.ephemeral_dir / f"{volume_id}.img"
            staging = str(self.ephemeral_dir / f"{volume_id}.mnt")
            staged = self.store.get_staging(volume_id)
            if staged is None:
                existing = self.system.pool.size(backing)
                if existing is not None and existing != size:
                    raise Incompatible(
                        f"inline volume {kubelet_volume_id} exists with {existing} bytes"
                    )
                self.system.pool.create(backing, size)
                device = self._attach(volume_id, backing)
                try:
                    self._mount_staging(volume_id, device.path, staging, fs_type, cap)
                except BaseException:
                    # Nothing records it yet, so nothing would ever remove it: undo now.
                    self.system.loop.detach(device.path)
                    self.system.pool.remove(backing)
                    raise
                staged = NodeStaging(
                    volume_id,
                    staging,
                    AccessType.MOUNT,
                    cap.access_mode,
                    fs_type,
                    device.path,
                    0,
                    time.time(),
                )
                self.store.save_staging(staged)
                log.info("created inline ephemeral volume %s as %s", kubelet_volume_id, volume_id)
            self._publish_staged(volume_id, staged, target_path, cap, readonly)

    def _bind_target(
        self, volume_id: str, staged: NodeStaging, target_path: str, readonly: bool
    ) -> None:
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        present = self.system.mounts.find(target_path)
        if present is not None:
            if self._is_ours(present, device):
                return
            raise Incompatible(
                f"{target_path} already has {present.source} mounted on it, not volume {volume_id}"
            )
        if staged.access_type == AccessType.MOUNT:
            if self.system.mounts.find(staged.staging_path) is None:
                raise NotStaged(
                    f"volume {volume_id}: nothing is mounted at {staged.staging_path}; stage again"
                )
            self._prepare_dir(target_path, "target_path")
            self.system.mounts.bind(staged.staging_path, target_path, read_only=readonly)
        else:
            if device is None:
                raise NotStaged(f"volume {volume_id} has no loop device on this node; stage again")
            self._prepare_file(target_path, "target_path")
            self.system.mounts.bind(device.path, target_path, read_only=readonly)

    def unpublish(self, volume_id: str, target_path: str) -> None:
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        target_path = check_path(target_path, "target_path")
        resolved = self._resolve(volume_id)
        if resolved is None:
            return  # never ours, or an inline volume already gone
        with self.inflight.hold(resolved, "NodeUnpublishVolume"):
            record = self.store.get_node_publication(target_path)
            if record is not None and record.volume_id != resolved:
                raise Incompatible(f"{target_path} belongs to volume {record.volume_id}")
            mounted = self.system.mounts.find(target_path)
            device = self.system.loop.find(loop_tag(self.node_id, resolved))
            if record is None and (mounted is None or not self._is_ours(mounted, device)):
                # Nothing of this volume's is there: leave whatever is (the spec's answer is OK).
                return
            if mounted is not None:
                self._unmount(target_path)
            self._remove_target(target_path)
            if record is not None:
                self.store.delete_node_publication(target_path)
            self._beat_soon.set()
            log.info("unpublished %s from %s", volume_id, target_path)
            staged = self.store.get_staging(resolved)
            if (
                staged is not None
                and self._is_ephemeral(staged.staging_path)
                and not self.store.node_publications(resolved)
            ):
                self._teardown(staged.volume_id, staged.staging_path)
                self.system.pool.remove(self._backing_for(staged))
                log.info("deleted inline ephemeral volume %s (%s)", volume_id, resolved)

    def _teardown(self, volume_id: str, staging_path: str) -> None:
        """Unmount the staging path if the volume is what is mounted there, detach the loop
        device, forget the staging record. Never touches a mount that is not the volume's."""
        mounted = self.system.mounts.find(staging_path)
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        if mounted is not None and self._is_ours(mounted, device):
            self._unmount(staging_path)
        if device is not None:
            self.system.loop.detach(device.path)
        if self._is_ephemeral(staging_path):
            with suppress(OSError):
                os.rmdir(staging_path)
        self.store.delete_staging(volume_id)

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

    # ----- expansion -----
    def expand(self, volume_id: str, volume_path: str, required_bytes: int) -> int:
        """Make the loop device and the filesystem on it follow a grown backing file."""
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        if not volume_path:
            raise InvalidRequest("volume_path is required")
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
                except CommandError as e:
                    if staged.fs_type == "ext4" and "ermission denied" in e.stderr:
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
        if not volume_id:
            raise InvalidRequest("volume_id is required")
        if not volume_path:
            raise InvalidRequest("volume_path is required")
        staged, path = self._staged_at(volume_id, volume_path)
        kind = staged.access_type
        if not self._backing_for(staged).exists():
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
        if device.read_only and not access.effective_readonly(staged.access_mode, False):
            problem = f"{device.path} is read-only, though the volume is read-write"
        elif kind == AccessType.MOUNT and (errs := self.system.fs.error_count(device.path)):
            problem = (
                f"the kernel recorded {errs} {staged.fs_type} error(s) on {device.path}; "
                "unstage it and run fsck"
            )
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

    # ----- reconcile and fencing -----
    def reconcile(self) -> None:
        """Repair the kernel to match this node's records; drop what no record claims."""
        self.beat()
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
        self._sweep_ephemeral(stagings)
        for device in self.system.loop.list(loop_tag_prefix(self.node_id)):
            vid = volume_id_from_tag(device.tag)
            # A tag names the node, but two plugins misconfigured with one node ID could share
            # a kernel: only a device backed by this plugin's own pool or ephemeral directory is
            # this plugin's to drop.
            backing = device.backing_file
            mine = backing.startswith((f"{self.layout.volumes}/", f"{self.ephemeral_dir}/"))
            if vid is not None and vid not in stagings and mine:
                self._drop_untracked(vid, device)

    def _sweep_ephemeral(self, stagings: dict[str, NodeStaging]) -> None:
        """Inline volumes a crash left before their record was written: nothing else would ever
        remove them. Their loop devices, if any, go with the untracked ones just below."""
        if not self.ephemeral_dir.is_dir():
            return
        for path in sorted(self.ephemeral_dir.iterdir()):
            volume_id = path.name.split(".", 1)[0]
            if path.suffix in (".img", ".tmp") and volume_id not in stagings:
                if self.system.loop.find(loop_tag(self.node_id, volume_id)) is not None:
                    continue  # dropped with its device below; swept on the next start
                log.warning("repair: removing %s, an inline volume no record claims", path)
                path.unlink(missing_ok=True)

    def _repair_staging(self, s: NodeStaging) -> None:
        backing = self._backing_for(s)
        if not backing.exists():
            log.warning(
                "volume %s is staged but its backing file is gone; leaving it for NodeUnstage",
                s.volume_id,
            )
            return
        device = self.system.loop.find(loop_tag(self.node_id, s.volume_id))
        if device is None:
            device = self._attach(s.volume_id, backing, read_only=s.readonly)
            log.warning("repair: re-attached %s on %s", s.volume_id, device.path)
        if s.access_type == AccessType.MOUNT and self.system.mounts.find(s.staging_path) is None:
            cap = Capability(AccessType.MOUNT, s.access_mode, s.fs_type)
            self._mount_staging(
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

    def fence_revoked(self) -> list[str]:
        fenced = []
        for seen in self.store.stagings():
            if seen.generation == 0:
                continue
            if not ledger.is_revoked(
                self.layout.read_lease(seen.volume_id), self.node_id, seen.generation
            ):
                continue
            try:
                with self.inflight.hold(seen.volume_id, "fence"):
                    # Decide again under the guard: a NodeStage may have re-staged the volume
                    # under a newer grant since the first read.
                    current = self.store.get_staging(seen.volume_id)
                    lease = self.layout.read_lease(seen.volume_id)
                    if current is None or not ledger.is_revoked(
                        lease, self.node_id, current.generation
                    ):
                        continue
                    self._fence(current, lease)
                fenced.append(seen.volume_id)
            except Busy:
                log.warning(
                    "volume %s is revoked but busy; fencing it on the next pass", seen.volume_id
                )
        if fenced:
            self.beat()  # the next holder waits for this node to stop listing the volume
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
        self._beat_soon.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        tick = min(self.config.heartbeat_interval, self.config.fence_interval)
        next_beat = next_fence = time.monotonic()
        while not self._stop.is_set():
            self._beat_soon.wait(max(0.0, min(next_beat, next_fence) - time.monotonic()))
            if self._stop.is_set():
                return
            try:
                now = time.monotonic()
                if self._beat_soon.is_set() or now >= next_beat:
                    self._beat_soon.clear()
                    self.beat()
                    next_beat = now + tick
                if now >= next_fence:
                    next_fence = now + self.config.fence_interval
                    self.fence_revoked()
            except Exception:
                log.exception("heartbeat/fence pass failed; trying again next interval")
                self._stop.wait(tick)
