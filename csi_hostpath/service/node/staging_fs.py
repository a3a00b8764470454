"""A volume's filesystem at its staging path: made on first stage, grown to its device, mounted
onto the staging directory the node opened (targets.py), with the CO's mount flags."""

from __future__ import annotations

from csi_hostpath.core import access
from csi_hostpath.core.errors import (
    HeldElsewhere,
    Incompatible,
    InvalidRequest,
    WrongAccessForVolume,
)
from csi_hostpath.core.model import AccessType, Capability, NodeStaging
from csi_hostpath.service.node._log import log
from csi_hostpath.service.node.targets import Opened
from csi_hostpath.system.base import CommandError, ResourceBusy, System, held_by

# A grown device and its filesystem may differ by less than this without a grow: filesystems
# round their size down to whole blocks and allocation groups.
GROW_SLACK = 1 * access.MiB


def mount_filesystem(
    system: System,
    volume_id: str,
    device: str,
    opened: Opened,
    fs_type: str,
    cap: Capability,
    *,
    read_only: bool,
) -> None:
    found = system.fs.probe(device)
    grow = False
    if found is None:
        if read_only:
            raise WrongAccessForVolume(
                f"volume {volume_id} holds no filesystem yet, and a read-only stage can't "
                "make one: a writer must stage it first, or restore it from a snapshot"
            )
        log.info("formatting %s (%s) as %s", volume_id, device, fs_type)
        system.fs.mkfs(device, fs_type)
    elif found != fs_type:
        raise WrongAccessForVolume(
            f"volume {volume_id} already holds a {found} filesystem; it can't be staged as "
            f"{fs_type}"
        )
    else:
        # Restored into a larger volume, or expanded while unstaged: grow to the device.
        fs_size = system.fs.size(device) or 0
        grow = system.devices.size(device) - fs_size >= GROW_SLACK
        if grow and fs_type == "ext4":
            log.info("growing the ext4 of %s to its device before mounting", volume_id)
            grow_offline(system, volume_id, device)
            grow = False
    options = list(cap.mount_flags)
    if cap.access_mode in access.READER_ONLY_MODES or read_only:
        options.append("ro")
    if fs_type == "xfs" and "nouuid" not in options:
        # A clone or restore carries its source's xfs UUID, and the kernel refuses a second
        # mount of one UUID, even in another node plugin's mount namespace on this kernel.
        options.append("nouuid")
    try:
        system.mounts.mount_on(device, opened.obj, fs_type, options)
    except CommandError as e:
        if cap.mount_flags and mounts_without(system, device, opened, fs_type):
            raise InvalidRequest(
                f"the kernel refused the mount flags {list(cap.mount_flags)} for "
                f"{fs_type}: {e.stderr.strip()[:300]}"
            ) from e
        raise
    if grow:
        log.info("growing the %s of %s to its device", fs_type, volume_id)
        opened.reopen()  # the new mount's root, wherever a rename has put it
        system.fs.grow(device, opened.obj.where(), fs_type)


def grow_offline(system: System, volume_id: str, device: str) -> None:
    try:
        system.fs.grow_offline(device, "ext4")
    except ResourceBusy as e:
        who = held_by(system.loop.holders(device)) or "by a mount this plugin can't see"
        raise HeldElsewhere(
            f"volume {volume_id} grew while it was unstaged, and its ext4 must grow with it "
            f"before it is mounted, but {device} is still in use, {who}: a copy of its old "
            "mount lives on in another mount namespace (a process that unshared its mounts, "
            "or a container started, while the volume was staged). NodeStageVolume succeeds "
            "once that process ends or unmounts it: stop it, or run "
            "`nsenter -t PID -m umount MOUNT_POINT` with the PID and the mount point above"
        ) from e


def mounts_without(system: System, device: str, opened: Opened, fs_type: str) -> bool:
    """Does the device mount without the CO's flags? Then the flags were the problem."""
    try:
        system.mounts.mount_on(
            device, opened.obj, fs_type, ["ro", "nouuid"] if fs_type == "xfs" else ["ro"]
        )
    except CommandError:
        return False
    system.mounts.unmount_on(opened.parent, opened.name)
    opened.reopen()
    return True


def check_same_stage(system: System, existing: NodeStaging, cap: Capability, fs_type: str) -> None:
    """A repeated NodeStage must ask for what is staged; other flags are ALREADY_EXISTS."""
    problems = []
    if fs_type != existing.fs_type:
        problems.append(f"as {existing.fs_type or 'block'}, not {fs_type or 'block'}")
    mounted = system.mounts.find(existing.staging_path)
    if cap.access_type == AccessType.MOUNT and mounted is not None:
        have, want = access.vfs_flags(mounted.options), access.vfs_flags(cap.mount_flags)
        if have != want:
            problems.append(f"with mount flags {sorted(have)}, not {sorted(want)}")
    if problems:
        raise Incompatible(
            f"volume {existing.volume_id} is already staged at {existing.staging_path} "
            f"{' and '.join(problems)}; unstage it before staging it differently"
        )
