"""The node's kernel steps for one volume: attach its loop device, mount or bind it, and take
it down again. Idempotent: each step first looks at what the kernel already has."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from csi_hostpath.core.errors import (
    ForeignMount,
    Incompatible,
    InvalidRequest,
    NotStaged,
    PathDiverted,
    TargetBusy,
)
from csi_hostpath.core.model import AccessType, Capability, NodeStaging
from csi_hostpath.core.naming import loop_tag, node_key
from csi_hostpath.core.request_text import shown
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.staging_fs import mount_filesystem
from csi_hostpath.service.node.targets import (
    Make,
    Opened,
    open_existing,
    open_for_mount,
    remove_made,
    require_empty,
)
from csi_hostpath.system.base import (
    LoopDevice,
    MountEntry,
    ResourceBusy,
    held_by,
)
from csi_hostpath.system.pinned import SymlinkInPath

# A bind of a block device node shows the filesystem /dev is: devtmpfs on a host, a tmpfs in a
# container whose runtime populated /dev (a kind node).
DEVICE_NODE_FS = ("devtmpfs", "tmpfs")


class NodeMounts:
    def __init__(self, ctx: NodeContext) -> None:
        self.node_id = ctx.node_id
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        # Inline ephemeral volumes belong to this node alone. Their mount points live in its
        # state directory (they hold no bytes); their files live in the pool, in a directory of
        # this node's own that no controller's reconcile reads. A file beside state.db let any
        # pod fill the filesystem that the store must commit to.
        self.ephemeral_dir = ctx.state_dir / "ephemeral"
        # Path (a target, a staging path, or a device whose detach waits) -> who held it busy at
        # the last try; the heartbeat reports it, so inspect names them too.
        self.busy: dict[str, dict[str, Any]] = {}
        self.inline_dir = ctx.layout.root / "inline" / node_key(ctx.node_id)

    def is_ephemeral(self, staging_path: str) -> bool:
        return staging_path.startswith(str(self.ephemeral_dir) + "/")

    def inline_file(self, volume_id: str) -> Path:
        return self.inline_dir / f"{volume_id}.img"

    def backing_for(self, s: NodeStaging) -> Path:
        if self.is_ephemeral(s.staging_path):
            path = self.inline_file(s.volume_id)
            legacy = self.ephemeral_dir / f"{s.volume_id}.img"  # made before files moved
            return legacy if not path.exists() and legacy.exists() else path
        return self.layout.volume_file(s.volume_id)

    def is_ours(self, entry: MountEntry, device: LoopDevice | None) -> bool:
        """Is this mount the volume's own: its filesystem (a bind shows the same source device)
        or, for a block volume, a bind of its device node? A root named /loopN is not proof (a
        directory of that name anywhere binds with the same root, and NodeUnpublish took such a
        foreign mount down): the file mounted there must be the device node itself."""
        if device is None:
            return False
        if entry.source == device.path:
            return True
        return (
            entry.root == f"/{os.path.basename(device.path)}"
            and entry.fs_type in DEVICE_NODE_FS
            and self.system.devices.is_node(entry.mount_point, device.path)
        )

    def is_volumes(self, entry: MountEntry, volume_id: str, device: LoopDevice | None) -> bool:
        """is_ours, and where the volume's loop device is gone (detached behind the driver's
        back), a mount of the device its staging record names: its filesystem, or a bind of its
        node. The node can't be asked (its number may be another device's now), but nothing
        else binds a loop device's node at this volume's recorded target."""
        if device is not None:
            return self.is_ours(entry, device)
        staged = self.store.get_staging(volume_id)
        if staged is None or not staged.device:
            return False
        return entry.source == staged.device or (
            entry.root == f"/{os.path.basename(staged.device)}" and entry.fs_type in DEVICE_NODE_FS
        )

    def unmount(self, opened: Opened, *, lazy: bool = False) -> None:
        """Unmount the mount whose root opened holds (the caller identified it as the volume's),
        then reopen the name from the pinned parent: what is there now."""
        path = opened.path
        opened.obj.close()  # a descriptor of the mount would keep it busy
        try:
            self.system.mounts.unmount_on(opened.parent, opened.name, lazy=lazy)
        except ResourceBusy as e:
            who = held_by(self.system.mounts.holders(path)) or self.mounted_beneath(path)
            self.note_busy(path, who)
            if who.endswith("beneath it"):
                raise TargetBusy(f"{path} is busy: {who}; unmount that first, then retry") from e
            if who:
                raise TargetBusy(
                    f"{path} is busy: {who}; retry once they let go of it (stop them, or cd "
                    "out of the path)"
                ) from e
            raise TargetBusy(
                f"{path} is busy: a process has files or its working directory in it, or "
                "another mount sits beneath it; retry once it is released"
            ) from e
        finally:
            try:
                opened.reopen()
            except (SymlinkInPath, FileNotFoundError) as e:
                # The volume's mount there is down; what the name holds now is a link, which is
                # never followed, so whatever else the call had to do there waits for a retry.
                raise PathDiverted(
                    f"{shown(path)} was replaced by a symbolic link as the volume's mount there "
                    "was taken down; restore the directory the CO made, then retry"
                ) from e
        self.busy.pop(path, None)

    def mounted_beneath(self, path: str) -> str:
        """ "P is mounted beneath it" for the first mount below path (what keeps an unmount
        busy when no process holds the filesystem), or ""."""
        inside = path.rstrip("/") + "/"
        below = [
            m.mount_point for m in self.system.mounts.list() if m.mount_point.startswith(inside)
        ]
        if not below:
            return ""
        more = f" (and {len(below) - 1} more)" if len(below) > 1 else ""
        return f"{below[0]}{more} is mounted beneath it"

    def forget_released(self) -> bool:
        """Drop the busy notes whose cause has gone (the mount beneath unmounted, the holders
        exited, the path unmounted some other way); True if any went. Nothing retries the
        unmount of a path its user now wants to keep, so without this a note outlived its cause
        and inspect called the volume stuck until the driver restarted."""
        if not self.busy:
            return False
        points = [m.mount_point for m in self.system.mounts.list()]
        gone = [
            path
            for path in self.busy
            if path not in points
            or not (
                any(p.startswith(path.rstrip("/") + "/") for p in points)
                or self.system.mounts.holders(path)
            )
        ]
        for path in gone:
            self.busy.pop(path, None)
        return bool(gone)

    def note_busy(self, path: str, who: str) -> None:
        log.warning("%s is busy: %s", path, who or "no process found; a mount beneath it?")
        self.busy[path] = {
            "held_by": who,
            "since": self.busy.get(path, {}).get("since", time.time()),
        }

    @staticmethod
    def check_target(path: str, what: str, make: Make) -> None:
        """The early check of a path a later step mounts onto (which opens it again, and checks
        the object it then holds): fail before a loop device is attached for nothing."""
        with open_for_mount(path, what, make):
            pass

    def attach(self, volume_id: str, backing: Path, *, read_only: bool = False) -> LoopDevice:
        device = self.system.loop.attach(
            backing, loop_tag(self.node_id, volume_id), read_only=read_only
        )
        if device.size_bytes < (self.system.pool.size(backing) or 0):
            # Attached before the backing file grew: make the device see the new size.
            self.system.loop.refresh_capacity(device.path)
        return device

    def mount_staging(
        self,
        volume_id: str,
        device: str,
        staging_path: str,
        fs_type: str,
        cap: Capability,
        *,
        read_only: bool = False,
    ) -> None:
        with open_for_mount(staging_path, "staging_target_path", "dir") as opened:
            mounted = self.system.mounts.find_on(opened.obj)
            if mounted is not None:
                if mounted.source == device:
                    return
                raise Incompatible(f"{staging_path} already has {mounted.source} mounted on it")
            require_empty(opened, "staging_target_path")
            self.busy.pop(staging_path, None)  # a fence's lazy unmount may have left it noted
            mount_filesystem(
                self.system, volume_id, device, opened, fs_type, cap, read_only=read_only
            )

    def bind_target(
        self, volume_id: str, staged: NodeStaging, target_path: str, readonly: bool
    ) -> None:
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        if staged.access_type != AccessType.MOUNT:
            if device is None:
                raise NotStaged(f"volume {volume_id} has no loop device on this node; stage again")
            with open_for_mount(target_path, "target_path", "file") as target:
                if self._bound_already(volume_id, target, device):
                    return
                self.system.mounts.bind_device_on(device.path, target.obj, read_only=readonly)
            return
        # The target's parent on the volume's own filesystem (another name for a directory
        # inside the staging mount) is refused before anything is made in it.
        with (
            self._staged_mount(volume_id, staged, device) as (staging, mounted),
            open_for_mount(
                target_path, "target_path", "dir", not_on=mounted.device_number
            ) as target,
        ):
            if self._bound_already(volume_id, target, device):
                return
            self.system.mounts.bind_on(staging.obj, target.obj, read_only=readonly)

    def _bound_already(self, volume_id: str, target: Opened, device: LoopDevice | None) -> bool:
        """True for the repeat (the volume's own mount is there); Incompatible for another's;
        InvalidRequest for a target that holds anything."""
        present = self.system.mounts.find_on(target.obj)
        if present is not None:
            if self.is_ours(present, device):
                return True
            raise Incompatible(
                f"{target.path} already has {present.source} mounted on it, not volume {volume_id}"
            )
        if not (target.obj.is_file() or target.obj.is_dir()):  # a device node nothing binds
            raise InvalidRequest(
                f"target_path {shown(target.path)} is not a regular file; a block volume needs a "
                "file"
            )
        require_empty(target, "target_path")
        return False

    @contextmanager
    def _staged_mount(
        self, volume_id: str, staged: NodeStaging, device: LoopDevice | None
    ) -> Iterator[tuple[Opened, MountEntry]]:
        """The volume's staging mount, pinned: the source of a bind is the mount identified as
        the volume's, not whatever the staging path leads to now."""
        try:
            opened = open_existing(staged.staging_path)
        except SymlinkInPath as e:
            raise PathDiverted(
                f"volume {volume_id}: staging_target_path {staged.staging_path} now leads "
                "through a symbolic link; restore the directory the CO made, then retry"
            ) from e
        if opened is None:
            raise NotStaged(
                f"volume {volume_id}: nothing is mounted at {staged.staging_path}; stage again"
            )
        with opened:
            mounted = self.system.mounts.find_on(opened.obj)
            if mounted is None or not self.is_ours(mounted, device):
                raise NotStaged(
                    f"volume {volume_id}: its filesystem is not mounted at {staged.staging_path}"
                    "; stage again"
                )
            yield opened, mounted

    def where_mounted(self, device: LoopDevice | None) -> str:
        """ ", and it is mounted at A, B" for a message: where the volume's mounts really are."""
        points = [m.mount_point for m in self.system.mounts.list() if self.is_ours(m, device)]
        return f", and it is mounted at {', '.join(points[:4])}" if points else ""

    def diverted(self, volume_id: str, what: str, path: str, device: LoopDevice | None) -> str:
        return (
            f"volume {volume_id}: {what} {shown(path)} now leads through a symbolic link. The "
            f"driver never unmounts through one, so the volume stays mounted"
            f"{self.where_mounted(device)}. Restore the directory the CO made (a real one), "
            "then retry"
        )

    def teardown(self, volume_id: str, staging_path: str) -> None:
        """Unmount the staging path if the volume is what is mounted there, detach the loop
        device, forget the staging record. Never touches a mount that is not the volume's."""
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        self.unmount_staging(volume_id, staging_path, device)
        if device is not None:
            self.system.loop.detach(device)
            if self.system.loop.find(device.tag) is not None:
                # Still open elsewhere: the kernel only set autoclear, and the device (and the
                # backing file) stay in use until the holders close it. Logged, not kept for
                # inspect: the staging record goes now, and the device number may be reused.
                who = held_by(self.system.loop.holders(device.path))
                if who:
                    log.warning("detach of %s (%s) waits: %s", device.path, volume_id, who)
        self.store.delete_staging(volume_id)

    def unmount_staging(
        self, volume_id: str, staging_path: str, device: LoopDevice | None, *, lazy: bool = False
    ) -> None:
        """The volume's own mount at the staging path, found through a descriptor of what the
        path holds and unmounted through it; a mount that is not the volume's is never touched."""
        recorded = device is not None or self.store.get_staging(volume_id) is not None
        try:
            opened = open_existing(staging_path)
        except SymlinkInPath as e:
            if not recorded:
                return
            raise PathDiverted(
                self.diverted(volume_id, "staging_target_path", staging_path, device)
            ) from e
        if opened is None:
            return
        with opened:
            mounted = self.system.mounts.find_on(opened.obj)
            if mounted is not None and not self.is_ours(mounted, device) and recorded:
                # Answering OK would let the CO delete the backing file while whatever sits
                # here (a stacked mount, a second loop device over ours) still uses the volume.
                raise ForeignMount(
                    f"{staging_path} has {mounted.source} ({mounted.fs_type}) mounted on it, "
                    f"not volume {volume_id}'s device: it was mounted there by someone else. "
                    f"Unmount it (umount {staging_path}), then retry NodeUnstageVolume"
                )
            for _ in range(4):  # a racing stage may have stacked the volume's mount twice
                if mounted is None or not self.is_ours(mounted, device):
                    break
                self.unmount(opened, lazy=lazy)
                mounted = self.system.mounts.find_on(opened.obj)
            if self.is_ephemeral(staging_path):
                remove_made(opened)

    def take_down_target(
        self, volume_id: str, target_path: str, *, recorded: bool, lazy: bool = False
    ) -> bool:
        """Unmount the volume's mount at target_path and remove the target the driver made.
        False when nothing of the volume's is there and nothing records it: nothing is touched.
        The mount is identified by what it is (the volume's device), through a descriptor of
        what the path holds, never by the path again."""
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        try:
            opened = open_existing(target_path)
        except SymlinkInPath as e:
            if not recorded:
                log.info("%s leads through a symbolic link: nothing of %s's there",
                         shown(target_path), volume_id)  # fmt: skip
                return False
            raise PathDiverted(self.diverted(volume_id, "target_path", target_path, device)) from e
        if opened is None:
            self.busy.pop(target_path, None)
            return recorded
        with opened:
            mounted = self.system.mounts.find_on(opened.obj)
            ours = mounted is not None and self.is_volumes(mounted, volume_id, device)
            if not ours and not recorded:
                return False  # nothing of this volume's is there: leave whatever is
            if mounted is not None and not ours:
                raise ForeignMount(
                    f"{target_path} has {mounted.source} ({mounted.fs_type}) mounted on it, not "
                    f"volume {volume_id}'s: it is not unmounted for the volume. Unmount it, "
                    "then retry NodeUnpublishVolume"
                )
            for _ in range(4):
                if mounted is None or not self.is_volumes(mounted, volume_id, device):
                    break
                self.unmount(opened, lazy=lazy)
                mounted = self.system.mounts.find_on(opened.obj)
            # Unmounted some other way (a fence's lazy unmount): nobody holds it busy any more.
            self.busy.pop(target_path, None)
            remove_made(opened)
        return True
