"""mount and unmount, in the order the kubelet and the attacher use:
mount = ControllerPublishVolume (external-attacher) → NodeStageVolume (kubelet csi_attacher.go
MountDevice) → NodePublishVolume (kubelet csi_mounter.go SetUpAt); unmount = NodeUnpublishVolume
(csi_mounter.go TearDownAt), then, once no mount of the volume is left, NodeUnstageVolume
(csi_attacher.go UnmountDevice) → ControllerUnpublishVolume (the attacher)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.system.base import held_by
from csi_hostpath.system.holders import holders_of_path
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.client import capability
from csi_hostpath.volume_cli.commands_volume import release
from csi_hostpath.volume_cli.context import Context, absolute, volume_named
from csi_hostpath.volume_cli.exit_codes import BUSY, EXISTS, FAILED, NOT_FOUND, USAGE
from csi_hostpath.volume_cli.kernel import loop_volume, mount_source, mounts_below
from csi_hostpath.volume_cli.records import Records, VolumeMount, VolumeRecord


def _result(vol: VolumeRecord, m: VolumeMount, staging: str) -> dict[str, object]:
    return {
        "volume": vol.name,
        "volume_id": vol.volume_id,
        "path": m.path,
        "readonly": m.readonly,
        "fs": vol.fs,
        "staging_path": staging,
    }


def mount(ctx: Context, args: argparse.Namespace) -> int:
    path = absolute(args.path)
    with ctx.records.locked() as records:
        vol = volume_named(records, args.name)
        held = records.mount_at(path)
        if held is not None:
            other, m = held
            if other.name == vol.name and m.readonly == (args.read_only or vol.mode == "rox"):
                ctx.out.note(f"{vol.name} is already mounted at {path}; nothing to do")
                ctx.out.result(_result(vol, m, vol.staging_path), "")
                return 0
            raise CliError(
                EXISTS,
                f"{path} already has volume {other.name} mounted on it",
                f"pick another path, or `csi-hostpath volume unmount {path}` first",
            )
        source = mount_source(path)
        adopt = source is not None and loop_volume(path) == vol.volume_id
        if adopt:
            # This volume is on PATH already, but unrecorded: a mount killed after the driver
            # bound it. NodePublishVolume again is idempotent; then it is recorded.
            ctx.out.note(f"{vol.name} is mounted at {path} without a record; recording it")
        elif source is not None:
            raise CliError(
                EXISTS,
                f"{path} is already a mount point ({source} is mounted there)",
                "pick an empty path that nothing is mounted on",
            )
        elif hidden := _would_hide(path):
            raise CliError(
                EXISTS,
                f"{path} holds {hidden}: the mount would hide them until it is unmounted",
                f"mount on an empty directory or a new path (`csi-hostpath volume mount "
                f"{vol.name} ./{vol.name}`), or move them out first",
            )
        driver = ctx.driver
        cap = capability(vol.fs, vol.mode, driver.single_node_multi_writer())
        readonly = args.read_only or vol.mode == "rox"
        record = _before_publish(path, readonly)
        staged_now = False
        try:
            if not vol.staging_path:
                _stage(ctx, vol, cap)
                staged_now = True
                vol.fs_behind = False  # the stage grew the filesystem to the volume
            driver.call(
                driver.node.NodePublishVolume,
                pb.NodePublishVolumeRequest(
                    volume_id=vol.volume_id,
                    staging_target_path=vol.staging_path,
                    target_path=path,
                    volume_capability=cap,
                    readonly=readonly,
                    publish_context=vol.publish_context,
                    volume_context=vol.volume_context,
                ),
                "NodePublishVolume",
            )
        except CliError:
            if staged_now:
                # Leave nothing behind: this call staged it, so this call unstages it.
                with suppress(CliError):
                    release(ctx, vol)
            _after_unpublish(record, vol.fs)
            raise
        vol.mounts.append(record)
    kind = "a block device" if vol.fs == "block" else f"{vol.fs}, {'ro' if readonly else 'rw'}"
    ctx.out.result(
        _result(vol, record, vol.staging_path),
        f"mounted {vol.name} at {path} ({kind})\nnext: csi-hostpath volume unmount {path}",
    )
    return 0


def _before_publish(path: str, readonly: bool) -> VolumeMount:
    """Make PATH's missing parents, as the kubelet makes a target's parent (the driver makes the
    target itself), and note what was there before."""
    missing = []
    parent = os.path.dirname(path)
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    record = VolumeMount(path=path, readonly=readonly, made_dirs=missing[::-1])
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        record.target_existed = True
        record.target_mode, record.target_uid, record.target_gid = st.st_mode, st.st_uid, st.st_gid
    for directory in record.made_dirs:
        try:
            os.mkdir(directory)
        except OSError as e:
            _after_unpublish(record, "")
            raise CliError(
                FAILED, f"can't make {directory}: {e.strerror}", "pick another path"
            ) from e
    return record


def _after_unpublish(m: VolumeMount, fs: str) -> None:
    """Undo what mount made and no more: the user's own empty PATH comes back as it was (the
    driver removes a target it finds empty), the parents mount made go if they are empty."""
    if m.target_existed and not os.path.lexists(m.path):
        with suppress(OSError):
            if fs == "block":
                os.close(os.open(m.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            else:
                os.mkdir(m.path)
            os.chown(m.path, m.target_uid, m.target_gid)
            os.chmod(m.path, m.target_mode & 0o7777)
    for directory in reversed(m.made_dirs):
        try:
            os.rmdir(directory)
        except OSError:
            break  # not empty: something else lives there now


def _stage(ctx: Context, vol: VolumeRecord, cap: pb.VolumeCapability) -> None:
    driver = ctx.driver
    # Kubernetes publishes read-only at the controller only for a read-only PV; a pod's
    # readOnly goes to NodePublish alone. A rox volume is read-only everywhere.
    answer = driver.call(
        driver.controller.ControllerPublishVolume,
        pb.ControllerPublishVolumeRequest(
            volume_id=vol.volume_id,
            node_id=driver.node_id,
            volume_capability=cap,
            readonly=vol.mode == "rox",
            volume_context=vol.volume_context,
        ),
        "ControllerPublishVolume",
    )
    staging = ctx.records.staging_path(vol.volume_id)
    staging.mkdir(parents=True, exist_ok=True)
    try:
        driver.call(
            driver.node.NodeStageVolume,
            pb.NodeStageVolumeRequest(
                volume_id=vol.volume_id,
                staging_target_path=str(staging),
                volume_capability=cap,
                publish_context=dict(answer.publish_context),
                volume_context=vol.volume_context,
            ),
            "NodeStageVolume",
        )
    except CliError:
        with suppress(CliError):
            driver.call(
                driver.controller.ControllerUnpublishVolume,
                pb.ControllerUnpublishVolumeRequest(
                    volume_id=vol.volume_id, node_id=driver.node_id
                ),
                "ControllerUnpublishVolume",
            )
        with suppress(OSError):
            staging.rmdir()
        raise
    vol.staging_path = str(staging)
    vol.publish_context = dict(answer.publish_context)


def _adopt(
    records: Records, path: str, staging_dir: Callable[[str], Path]
) -> tuple[VolumeRecord, VolumeMount] | None:
    """A mount of a recorded volume that the records lost (a `mount` killed after the driver
    bound it): take it in, so `unmount` can undo it. Never anything else's mount."""
    volume_id = loop_volume(path)
    vol = records.volume_by_id(volume_id) if volume_id else None
    if vol is None:
        return None
    record = VolumeMount(path=path, readonly=False)
    vol.mounts.append(record)
    staging = staging_dir(vol.volume_id)
    if not vol.staging_path and staging.is_dir():
        # The staging path is fixed per volume, so a lost record can be found again.
        vol.staging_path = str(staging)
    return vol, record


def _let_go_of(path: str) -> None:
    """This command starts with its shell's working directory and descriptors: `cd data; unmount
    .` or a shell's `exec 3< data/f` would make it keep PATH busy itself, and name itself as a
    holder to stop. It leaves PATH (stdin, stdout and stderr stay: the user asked for those)."""
    inside = path.rstrip("/") + "/"
    with suppress(OSError):
        if (os.getcwd() + "/").startswith(inside):
            os.chdir("/")
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the directory listing's own descriptor, gone already
        if int(name) > 2 and (target == path or target.startswith(inside)):
            with suppress(OSError):
                os.close(int(name))


def _would_hide(path: str) -> str:
    """What a mount on path would hide, as "3 entries (a, b, c)", or "": a directory's entries,
    or a file's bytes (a block volume's bind)."""
    if os.path.islink(path):
        return ""  # the driver refuses a symlink with its own reason
    try:
        if os.path.isfile(path):
            size = os.path.getsize(path)
            return f"{size} bytes" if size else ""
        entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
    except OSError:
        return ""
    if not entries:
        return ""
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({shown})"


def _by_name(records: Records, name: str) -> tuple[VolumeRecord, VolumeMount] | None:
    """The one mount of the volume named NAME (`unmount data`, said as `mount data ./x` was);
    refused, naming each path, when there are several."""
    vol = records.volumes.get(name)
    if vol is None:
        return None
    if not vol.mounts:
        raise CliError(NOT_FOUND, f"volume {name} is not mounted", "nothing to unmount")
    if len(vol.mounts) > 1:
        raise CliError(
            USAGE,
            f"{name} is mounted at {len(vol.mounts)} places",
            "name the one to unmount: "
            + "; ".join(f"csi-hostpath volume unmount {m.path}" for m in vol.mounts),
        )
    return vol, vol.mounts[0]


def unmount(ctx: Context, args: argparse.Namespace) -> int:
    path = absolute(args.path)
    _let_go_of(path)
    with ctx.records.locked() as records:
        held = records.mount_at(path) or _adopt(records, path, ctx.records.staging_path)
        if held is None and not os.path.lexists(path):
            held = _by_name(records, args.path)
            if held is not None:
                path = held[1].path
                _let_go_of(path)
        if held is None:
            source = mount_source(path)
            detail = (
                f"{path} has {source} mounted on it, but not by `csi-hostpath volume mount`"
                if source
                else f"no volume is mounted at {path}"
            )
            raise CliError(
                NOT_FOUND, detail, "see where volumes are mounted with `csi-hostpath volume list`"
            )
        vol, m = held
        driver = ctx.driver
        try:
            driver.call(
                driver.node.NodeUnpublishVolume,
                pb.NodeUnpublishVolumeRequest(volume_id=vol.volume_id, target_path=path),
                "NodeUnpublishVolume",
            )
        except CliError as e:
            if e.exit_code == BUSY:
                # The driver names the holders it can see; one in another PID namespace (a node
                # plugin without hostPID) sees none, and this command, on the host, may.
                who = "" if "held by" in e.message else held_by(holders_of_path(path))
                if who:
                    e.message += f" ({who})"
                if who or "held by" in e.message:
                    e.next_step = "stop those processes (or cd out of the path), then unmount again"
                elif below := [p for p, _ in mounts_below(path) if p != path]:
                    inner = records.mount_at(below[0])
                    how = "csi-hostpath volume unmount" if inner else "umount"
                    e.next_step = f"unmount it first ({how} {below[0]}), then unmount {path}"
            raise
        vol.mounts.remove(m)
        _after_unpublish(m, vol.fs)
        unstaged = False
        if not vol.mounts and vol.staging_path:
            staging = vol.staging_path
            release(ctx, vol)
            unstaged = True
        else:
            staging = vol.staging_path
    result = _result(vol, m, staging)
    result["unstaged"] = unstaged
    tail = "; released from this node" if unstaged else ""
    ctx.out.result(result, f"unmounted {vol.name} from {path}{tail}")
    return 0
