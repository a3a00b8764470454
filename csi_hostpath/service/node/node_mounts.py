"""The node's kernel steps for one volume: attach its loop device, mount or bind it, and take
it down again. Idempotent: each step first looks at what the kernel already has."""

from __future__ import annotations

import errno
import os
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from csi_hostpath.core import access
from csi_hostpath.core.errors import (
    ForeignMount,
    HeldElsewhere,
    Incompatible,
    InvalidRequest,
    NotStaged,
    TargetBusy,
    WrongAccessForVolume,
)
from csi_hostpath.core.model import AccessType, Capability, NodeStaging
from csi_hostpath.core.naming import loop_tag, node_key
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.paths import create_file_nofollow, mounted_at, refuse_symlink
from csi_hostpath.system.base import (
    CommandError,
    LoopDevice,
    MountEntry,
    ResourceBusy,
    held_by,
)

# A bind of a block device node shows the filesystem /dev is: devtmpfs on a host, a tmpfs in a
# container whose runtime populated /dev (a kind node).
DEVICE_NODE_FS = ("devtmpfs", "tmpfs")

# A grown device and its filesystem may differ by less than this without a grow: filesystems
# round their size down to whole blocks and allocation groups.
GROW_SLACK = 1 * access.MiB


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

    def unmount(self, path: str, *, lazy: bool = False) -> None:
        try:
            self.system.mounts.unmount(path, lazy=lazy)
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
    def prepare_dir(path: str, what: str) -> None:
        refuse_symlink(path, what)
        if os.path.lexists(path) and not os.path.isdir(path):
            raise InvalidRequest(f"{what} {path} exists and is not a directory")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise InvalidRequest(f"{what} {path} can't be created: {e.strerror}") from e
        refuse_symlink(path, what)  # swapped in while it was made

    @staticmethod
    def prepare_file(path: str, what: str) -> None:
        refuse_symlink(path, what)
        if os.path.isdir(path):
            raise InvalidRequest(f"{what} {path} is a directory; a block volume needs a file")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            create_file_nofollow(path)
        except OSError as e:
            if e.errno == errno.ELOOP:
                refuse_symlink(path, what)
            raise InvalidRequest(f"{what} {path} can't be created: {e.strerror}") from e

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
        mounted = self.system.mounts.find(staging_path)
        if mounted is not None:
            if mounted.source == device:
                return
            raise Incompatible(f"{staging_path} already has {mounted.source} mounted on it")
        self.busy.pop(staging_path, None)  # a fence's lazy unmount may have left it noted
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
                self.grow_offline(volume_id, device)
                grow = False
        options = list(cap.mount_flags)
        if cap.access_mode in access.READER_ONLY_MODES or read_only:
            options.append("ro")
        if fs_type == "xfs" and "nouuid" not in options:
            # A clone or restore carries its source's xfs UUID, and the kernel refuses a second
            # mount of one UUID, even in another node plugin's mount namespace on this kernel.
            options.append("nouuid")
        self.prepare_dir(staging_path, "staging_target_path")
        try:
            self.system.mounts.mount(device, staging_path, fs_type, options)
        except CommandError as e:
            if cap.mount_flags and self.mounts_without(device, staging_path, fs_type):
                raise InvalidRequest(
                    f"the kernel refused the mount flags {list(cap.mount_flags)} for "
                    f"{fs_type}: {e.stderr.strip()[:300]}"
                ) from e
            raise
        if grow:
            log.info("growing the %s of %s to its device", fs_type, volume_id)
            self.system.fs.grow(device, staging_path, fs_type)

    def grow_offline(self, volume_id: str, device: str) -> None:
        try:
            self.system.fs.grow_offline(device, "ext4")
        except ResourceBusy as e:
            who = held_by(self.system.loop.holders(device)) or "by a mount this plugin can't see"
            raise HeldElsewhere(
                f"volume {volume_id} grew while it was unstaged, and its ext4 must grow with it "
                f"before it is mounted, but {device} is still in use, {who}: a copy of its old "
                "mount lives on in another mount namespace (a process that unshared its mounts, "
                "or a container started, while the volume was staged). NodeStageVolume succeeds "
                "once that process ends or unmounts it: stop it, or run "
                "`nsenter -t PID -m umount MOUNT_POINT` with the PID and the mount point above"
            ) from e

    def mounts_without(self, device: str, staging_path: str, fs_type: str) -> bool:
        """Does the device mount without the CO's flags? Then the flags were the problem."""
        try:
            self.system.mounts.mount(
                device, staging_path, fs_type, ["ro", "nouuid"] if fs_type == "xfs" else ["ro"]
            )
        except CommandError:
            return False
        self.system.mounts.unmount(staging_path)
        return True

    def bind_target(
        self, volume_id: str, staged: NodeStaging, target_path: str, readonly: bool
    ) -> None:
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        present = self.system.mounts.find(target_path)
        if present is not None:
            if self.is_ours(present, device):
                return
            raise Incompatible(
                f"{target_path} already has {present.source} mounted on it, not volume {volume_id}"
            )
        if staged.access_type == AccessType.MOUNT:
            if self.system.mounts.find(staged.staging_path) is None:
                raise NotStaged(
                    f"volume {volume_id}: nothing is mounted at {staged.staging_path}; stage again"
                )
            self.prepare_dir(target_path, "target_path")
            self.system.mounts.bind(staged.staging_path, target_path, read_only=readonly)
        else:
            if device is None:
                raise NotStaged(f"volume {volume_id} has no loop device on this node; stage again")
            self.prepare_file(target_path, "target_path")
            self.system.mounts.bind(device.path, target_path, read_only=readonly)

    def teardown(self, volume_id: str, staging_path: str) -> None:
        """Unmount the staging path if the volume is what is mounted there, detach the loop
        device, forget the staging record. Never touches a mount that is not the volume's."""
        mounted = mounted_at(self.system, staging_path)
        device = self.system.loop.find(loop_tag(self.node_id, volume_id))
        if (
            mounted is not None
            and not self.is_ours(mounted, device)
            and (device is not None or self.store.get_staging(volume_id) is not None)
        ):
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
            self.unmount(staging_path)
            mounted = self.system.mounts.find(staging_path)
        if device is not None:
            self.system.loop.detach(device)
            if self.system.loop.find(device.tag) is not None:
                # Still open elsewhere: the kernel only set autoclear, and the device (and the
                # backing file) stay in use until the holders close it. Logged, not kept for
                # inspect: the staging record goes now, and the device number may be reused.
                who = held_by(self.system.loop.holders(device.path))
                if who:
                    log.warning("detach of %s (%s) waits: %s", device.path, volume_id, who)
        if self.is_ephemeral(staging_path):
            with suppress(OSError):
                os.rmdir(staging_path)
        self.store.delete_staging(volume_id)

    def remove_target(self, target_path: str) -> None:
        # Only what this plugin created: an empty directory or an empty placeholder file, never
        # a symlink (the driver never makes one) or what it points to.
        if os.path.islink(target_path) or self.system.mounts.find(target_path) is not None:
            return
        # Unmounted some other way (a fence's lazy unmount): nobody holds it busy any more.
        self.busy.pop(target_path, None)
        try:
            if os.path.isdir(target_path) and not os.path.islink(target_path):
                os.rmdir(target_path)
            elif os.path.isfile(target_path) and os.path.getsize(target_path) == 0:
                os.unlink(target_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("left %s in place: %s", target_path, e)

    def check_same_stage(self, existing: NodeStaging, cap: Capability, fs_type: str) -> None:
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
