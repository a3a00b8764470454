"""Inline ephemeral volumes: created, formatted and mounted by NodePublish, deleted by the
last NodeUnpublish, with no controller and no ledger (they are never shared)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from csi_hostpath.core import access, sizes
from csi_hostpath.core.capacity import POOL_RESERVE_BYTES
from csi_hostpath.core.context_keys import EPHEMERAL_SIZE_KEY, FS_TYPE_KEY
from csi_hostpath.core.errors import (
    CapacityOutOfRange,
    Incompatible,
    InvalidRequest,
    NoCapacity,
    Unsupported,
)
from csi_hostpath.core.model import AccessType, Capability, NodeStaging
from csi_hostpath.core.naming import is_volume_id, loop_tag
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.node_mounts import NodeMounts

EPHEMERAL_DEFAULT_SIZE = 100 * access.MiB

# Publishes a staged volume at a target: NodeService's own step, shared with inline volumes.
PublishStaged = Callable[[str, NodeStaging, str, Capability, bool], None]


def inline_size(text: str) -> int:
    """The size attribute of an inline volume: a Kubernetes quantity ("100Mi", "1.5Gi", "1e9")."""
    try:
        return sizes.parse_size(text)
    except sizes.QuantityError as exc:
        raise InvalidRequest(f"size {text[:40]!r} is not a usable quantity: {exc}") from None


def ephemeral_volume_id(node_id: str, kubelet_volume_id: str) -> str:
    """Kubelet names inline ephemeral volumes itself ("csi-<hash>"); the driver keys them by an
    ID of its own pattern, derived so that NodeUnpublish finds the same one."""
    digest = hashlib.sha256(f"{node_id}\0{kubelet_volume_id}".encode()).hexdigest()
    return f"vol-{digest[:32]}"


class InlineVolumes:
    def __init__(self, ctx: NodeContext, mounts: NodeMounts) -> None:
        self.ctx = ctx  # its flags: allow_inline_volumes, max_inline_size, max_volume_size
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.mounts = mounts
        self.inflight = ctx.inflight
        self.ephemeral_dir = mounts.ephemeral_dir

    def publish(
        self,
        kubelet_volume_id: str,
        target_path: str,
        cap: Capability,
        readonly: bool,
        volume_context: Mapping[str, str],
        publish_staged: PublishStaged,
    ) -> None:
        """An inline ephemeral volume lives and dies with its pod: create, format and mount it
        here, with no controller and no ledger (it is never shared)."""
        if not self.ctx.allow_inline_volumes:
            raise Unsupported(
                "inline ephemeral volumes are off on this node: they take node disk outside every "
                "quota. Start the driver with --allow-inline-volumes (and --max-inline-size) to "
                "serve them, or use a PersistentVolumeClaim"
            )
        if cap.access_type != AccessType.MOUNT:
            raise InvalidRequest("inline ephemeral volumes are filesystem volumes only")
        if len(kubelet_volume_id.encode()) > 1024 or "\x00" in kubelet_volume_id:
            raise InvalidRequest("volume_id is not a valid inline volume name")
        volume_id = ephemeral_volume_id(self.node_id, kubelet_volume_id)
        fs_type = cap.fs_type or volume_context.get(FS_TYPE_KEY, "") or access.DEFAULT_FS_TYPE
        if fs_type not in access.SUPPORTED_FS_TYPES:
            raise InvalidRequest(f"fs_type {fs_type!r} is not supported")
        cap_bytes = self.ctx.max_inline_size
        wanted = volume_context.get(EPHEMERAL_SIZE_KEY, "")
        size = inline_size(wanted) if wanted else min(EPHEMERAL_DEFAULT_SIZE, cap_bytes)
        size = access.round_capacity(size, 0, fs_type, self.ctx.max_volume_size)
        if size > cap_bytes:
            raise CapacityOutOfRange(
                f"an inline volume of {size} bytes exceeds this node's --max-inline-size of "
                f"{cap_bytes} bytes; ask for less, or use a PersistentVolumeClaim"
            )
        # The file goes into the pool (mounts.inline_dir), so the pool's filesystem is the one
        # that must hold it, less the reserve that keeps teardown possible on a full pool.
        free = self.system.pool.free_bytes() - POOL_RESERVE_BYTES
        if size > free:
            raise NoCapacity(
                f"an inline volume of {sizes.describe_bytes(size)} can't fit in the pool: "
                f"{sizes.describe_bytes(max(free, 0))} free beyond the "
                f"{sizes.describe_bytes(POOL_RESERVE_BYTES)} kept for teardown"
            )
        with self.inflight.hold(volume_id, "NodePublishVolume (ephemeral)"):
            self.ephemeral_dir.mkdir(parents=True, exist_ok=True)
            self.mounts.inline_dir.mkdir(parents=True, exist_ok=True)
            backing = self.mounts.inline_file(volume_id)
            staging = str(self.ephemeral_dir / f"{volume_id}.mnt")
            staged = self.store.get_staging(volume_id)
            if staged is None:
                existing = self.system.pool.size(backing)
                if existing is not None and existing != size:
                    raise Incompatible(
                        f"inline volume {kubelet_volume_id} exists with {existing} bytes"
                    )
                self.system.pool.create(backing, size)
                device = self.mounts.attach(volume_id, backing)
                try:
                    self.mounts.mount_staging(volume_id, device.path, staging, fs_type, cap)
                except BaseException:
                    # Nothing records it yet, so nothing would ever remove it: undo now.
                    self.system.loop.detach(device)
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
            publish_staged(volume_id, staged, target_path, cap, readonly)

    def sweep(self, stagings: dict[str, NodeStaging]) -> None:
        """Inline volumes a crash left before their record was written: nothing else would ever
        remove them. Their loop devices, if any, go with the untracked ones just below."""
        # The state directory held inline files before they moved to the pool.
        for directory in (self.mounts.inline_dir, self.ephemeral_dir):
            if directory.is_dir():
                self._sweep_dir(directory, stagings)

    def _sweep_dir(self, directory: Path, stagings: dict[str, NodeStaging]) -> None:
        for path in sorted(directory.iterdir()):
            volume_id = path.name.split(".", 1)[0]
            if path.suffix in (".img", ".tmp") and volume_id not in stagings:
                if self.system.loop.find(loop_tag(self.node_id, volume_id)) is not None:
                    continue  # dropped with its device below; swept on the next start
                log.warning("repair: removing %s, an inline volume no record claims", path)
                path.unlink(missing_ok=True)

    def resolve(self, volume_id: str) -> str | None:
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

    def delete_if_unpublished(self, volume_id: str, resolved: str) -> None:
        """After a NodeUnpublish: an inline volume lives as long as its one pod's target, so the
        last unpublish tears it down and deletes its file."""
        staged = self.store.get_staging(resolved)
        if (
            staged is not None
            and self.mounts.is_ephemeral(staged.staging_path)
            and not self.store.node_publications(resolved)
        ):
            self.mounts.teardown(staged.volume_id, staged.staging_path)
            self.system.pool.remove(self.mounts.backing_for(staged))
            log.info("deleted inline ephemeral volume %s (%s)", volume_id, resolved)
