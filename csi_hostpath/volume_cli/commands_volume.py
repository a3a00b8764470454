"""create, expand, delete: the controller's side of a volume's life (and, for expand, the node
step Kubernetes runs next: external-resizer's ControllerExpandVolume, then the kubelet's
NodeExpandVolume on the node where it is mounted)."""

from __future__ import annotations

import argparse
import os
from contextlib import suppress

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.access import MIN_SIZE, MiB
from csi_hostpath.core.sizes import describe_bytes, format_bytes
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.client import capability
from csi_hostpath.volume_cli.context import Context, volume_named
from csi_hostpath.volume_cli.copywatch import CopyWatch
from csi_hostpath.volume_cli.exit_codes import BUSY, EXISTS, NOT_FOUND, USAGE
from csi_hostpath.volume_cli.output import volume_json
from csi_hostpath.volume_cli.records import Records, VolumeRecord


def _source(
    records: Records, args: argparse.Namespace
) -> tuple[pb.VolumeContentSource | None, str, str, int]:
    """(the content source, how the record names it, the source's fs, its size) for --from-*."""
    if args.from_snapshot:
        snap = records.snapshots.get(args.from_snapshot)
        if snap is None:
            raise CliError(
                NOT_FOUND,
                f"no snapshot named {args.from_snapshot!r}",
                "see `csi-hostpath volume snapshots`",
            )
        src = pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snap.snapshot_id)
        )
        return src, f"snapshot:{snap.name}", snap.fs, snap.size_bytes
    if args.from_volume:
        vol = volume_named(records, args.from_volume)
        src = pb.VolumeContentSource(
            volume=pb.VolumeContentSource.VolumeSource(volume_id=vol.volume_id)
        )
        return src, f"volume:{vol.name}", vol.fs, vol.capacity_bytes
    return None, "", "", 0


def _rounded(asked: int, got: int, fs: str) -> str:
    """Why the driver made the volume larger than asked (core/access.py round_capacity), or ""."""
    if not asked or got <= asked:
        return ""
    minimum = MIN_SIZE.get("" if fs == "block" else fs, MiB)
    if got == minimum:
        why = f"the smallest {fs} volume the driver makes"
    elif got == -(-asked // MiB) * MiB:
        why = "a volume is a whole number of MiB"
    else:
        why = "the driver's rounding"
    if format_bytes(asked) != format_bytes(got):
        figures = f"{describe_bytes(asked)}: rounded up to {format_bytes(got)}"
    else:  # "9.3Gi: rounded up to 9.3Gi" said nothing: the figures in MiB, and the bytes
        figures = f"{asked / MiB:.1f}Mi ({asked} bytes): rounded up to {got // MiB}Mi ({got} bytes)"
    return f"asked for {figures}, {why}{_decimal_unit(asked)}"


_DECIMAL_UNITS = (("T", 12, "Ti"), ("G", 9, "Gi"), ("M", 6, "Mi"), ("k", 3, "Ki"))


def _decimal_unit(asked: int) -> str:
    """Where a size is a whole number of a decimal unit (10G) but not of MiB, the unit was
    likely meant binary: say which is which."""
    if asked % MiB == 0:
        return ""
    for unit, power, binary in _DECIMAL_UNITS:
        if asked % 10**power == 0:
            n = asked // 10**power
            binary_power = power // 3 * 10
            return f"; {unit} is decimal (10^{power} bytes): {n}{binary} is {n} x 2^{binary_power}"
    return ""


def create(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.records.locked() as records:
        if args.name in records.volumes or args.name in records.snapshots:
            kind = "volume" if args.name in records.volumes else "snapshot"
            raise CliError(
                EXISTS,
                f"a {kind} named {args.name!r} exists already",
                f"pick another name, or `csi-hostpath volume delete {args.name}` first",
            )
        source, source_name, source_fs, source_size = _source(records, args)
        fs = args.fs or source_fs or "ext4"
        if source_fs and fs != source_fs:
            raise CliError(
                USAGE,
                f"the source holds {source_fs}, not {fs}",
                f"leave out --fs (or pass --fs {source_fs})",
            )
        if args.mode == "rox" and source is None and fs != "block":
            # Read-only on every node, so nothing could ever format it or write to it.
            raise CliError(
                USAGE,
                f"a blank {fs} volume can't be rox: it is read-only everywhere, so no mount "
                "could ever make its filesystem",
                f"make it from content: `csi-hostpath volume create {args.name} --mode rox "
                "--from-snapshot SNAP` (or --from-volume VOLUME) of a volume that was mounted "
                "and written, or leave out --mode rox",
            )
        driver = ctx.driver
        cap = capability(fs, args.mode, driver.single_node_multi_writer())
        request = pb.CreateVolumeRequest(
            name=ctx.csi_name(args.name),
            volume_capabilities=[cap],
            capacity_range=pb.CapacityRange(required_bytes=args.size or 0),
        )
        what = "CreateVolume"
        if source is not None:
            request.volume_content_source.CopyFrom(source)
            kind, _, from_name = source_name.partition(":")
            pool = ctx.places.pool_dir
            source_file = (
                pool / "snapshots" / f"{source.snapshot.snapshot_id}.img"
                if kind == "snapshot"
                else pool / "volumes" / f"{source.volume.volume_id}.img"
            )
            watch = CopyWatch(source_file, pool / "volumes")
            progress = ctx.out.progress(
                f"restoring {kind} {from_name}" if kind == "snapshot" else f"cloning {from_name}",
                watch.detail,
            )
            try:
                volume = driver.call_waiting(
                    driver.controller.CreateVolume, request, what, progress.tick
                ).volume
            except CliError as e:
                if e.grpc_code == "OUT_OF_RANGE" and args.size and args.size < source_size:
                    e.next_step = (
                        f"ask for at least {format_bytes(source_size)}, the size of {from_name}, "
                        "or leave out --size"
                    )
                raise
            finally:
                progress.done()
        else:
            volume = driver.call(driver.controller.CreateVolume, request, what).volume
        record = VolumeRecord(
            name=args.name,
            volume_id=volume.volume_id,
            fs=fs,
            mode=args.mode,
            capacity_bytes=volume.capacity_bytes,
            source=source_name,
            volume_context=dict(volume.volume_context),
        )
        records.volumes[args.name] = record
    origin = f" from {source_name.replace(':', ' ')}" if source_name else ""
    rounded = _rounded(args.size or 0, record.capacity_bytes, fs)
    if rounded and ctx.out.as_json:
        ctx.out.note(rounded)  # stderr: stdout holds the document alone
    lines = [
        f"created {args.name}: {format_bytes(record.capacity_bytes)} {fs}{origin} "
        f"({record.volume_id})",
        *([rounded] if rounded else []),
        f"next: csi-hostpath volume mount {args.name} ./{args.name}",
    ]
    ctx.out.result(volume_json(record), "\n".join(lines))
    return 0


def expand(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.records.locked() as records:
        vol = volume_named(records, args.name)
        driver = ctx.driver
        current = driver.call(
            driver.controller.ControllerGetVolume,
            pb.ControllerGetVolumeRequest(volume_id=vol.volume_id),
            "ControllerGetVolume",
        ).volume.capacity_bytes
        vol.capacity_bytes = current
        if args.size < current:
            raise CliError(
                USAGE,
                f"{vol.name} is {format_bytes(current)}, more than the {describe_bytes(args.size)} "
                "asked for: a volume only grows",
                f"ask for more than {format_bytes(current)}; for a smaller volume, create one "
                "and copy the data over",
            )
        if args.size == current:
            ctx.out.result(
                {
                    "volume": vol.name,
                    "volume_id": vol.volume_id,
                    "capacity_bytes": current,
                    "filesystem": "not-needed",
                },
                f"{vol.name} is {format_bytes(current)} already; nothing to do",
            )
            return 0
        cap = capability(vol.fs, vol.mode, driver.single_node_multi_writer())
        wanted = pb.CapacityRange(required_bytes=args.size)
        answer = driver.call(
            driver.controller.ControllerExpandVolume,
            pb.ControllerExpandVolumeRequest(
                volume_id=vol.volume_id, capacity_range=wanted, volume_capability=cap
            ),
            "ControllerExpandVolume",
        )
        vol.capacity_bytes = answer.capacity_bytes
        note = ""
        if not answer.node_expansion_required:
            state = "not-needed"
        elif not vol.mounts:
            state = "on-next-mount"  # NodeStage grows the filesystem to the device
        else:
            # kubernetes pkg/volume/csi/expander.go (nodeExpandWithClient): volume_path is a
            # path the volume is published at, staging_target_path where it is staged.
            try:
                driver.call(
                    driver.node.NodeExpandVolume,
                    pb.NodeExpandVolumeRequest(
                        volume_id=vol.volume_id,
                        volume_path=vol.mounts[0].path,
                        staging_target_path=vol.staging_path,
                        capacity_range=wanted,
                        volume_capability=cap,
                    ),
                    "NodeExpandVolume",
                )
                state = "grown"
            except CliError as e:
                if e.exit_code != BUSY or e.grpc_code != "FAILED_PRECONDITION":
                    raise
                # The volume is bigger; only its mounted filesystem is not (yet): not a failure.
                state = "on-next-mount"
                vol.fs_behind = True
                note = f"the filesystem stays at its old size while mounted: {e.message}"
    human = f"expanded {args.name} to {format_bytes(vol.capacity_bytes)}"
    # A block volume has no filesystem: the node step grows its loop device, nothing on it.
    block = vol.fs == "block"
    if state == "on-next-mount":
        human += (
            "; the block device has the new size from its next mount"
            if block
            else "; the filesystem grows on its next mount"
        )
        if vol.mounts:
            human += f" (unmount {vol.mounts[0].path} and mount it again)"
    elif state == "grown":
        human += (
            f"; the block device at {vol.mounts[0].path} grew online"
            if block
            else f"; the filesystem grew online at {vol.mounts[0].path}"
        )
    if note:
        ctx.out.note(note)
    ctx.out.result(
        {
            "volume": vol.name,
            "volume_id": vol.volume_id,
            "capacity_bytes": vol.capacity_bytes,
            "filesystem": state,
        },
        human,
    )
    return 0


def delete(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.records.locked() as records:
        if args.name in records.snapshots:
            snap = records.snapshots[args.name]
            driver = ctx.driver
            driver.call(
                driver.controller.DeleteSnapshot,
                pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id),
                "DeleteSnapshot",
            )
            del records.snapshots[args.name]
            payload = {"kind": "snapshot", "name": snap.name, "id": snap.snapshot_id}
        else:
            vol = volume_named(records, args.name)
            if vol.mounts:
                paths = [m.path for m in vol.mounts]
                raise CliError(
                    BUSY,
                    f"volume {vol.name} is mounted at {', '.join(paths)}",
                    "unmount it first: "
                    + "; ".join(f"`csi-hostpath volume unmount {p}`" for p in paths),
                )
            driver = ctx.driver
            if vol.staging_path:
                # An unmount that stopped half-way left it staged: finish the reverse order.
                release(ctx, vol)
            driver.call(
                driver.controller.DeleteVolume,
                pb.DeleteVolumeRequest(volume_id=vol.volume_id),
                "DeleteVolume",
            )
            del records.volumes[args.name]
            payload = {"kind": "volume", "name": vol.name, "id": vol.volume_id}
    ctx.out.result(payload, f"deleted {payload['kind']} {payload['name']} ({payload['id']})")
    return 0


def release(ctx: Context, vol: VolumeRecord) -> None:
    """NodeUnstageVolume, then ControllerUnpublishVolume: what the kubelet (UnmountDevice) and
    then the attacher do once the last pod on the node stops using the volume."""
    driver = ctx.driver
    driver.call(
        driver.node.NodeUnstageVolume,
        pb.NodeUnstageVolumeRequest(volume_id=vol.volume_id, staging_target_path=vol.staging_path),
        "NodeUnstageVolume",
    )
    driver.call(
        driver.controller.ControllerUnpublishVolume,
        pb.ControllerUnpublishVolumeRequest(volume_id=vol.volume_id, node_id=driver.node_id),
        "ControllerUnpublishVolume",
    )
    with suppress(OSError):
        if not os.path.ismount(vol.staging_path):
            os.rmdir(vol.staging_path)
    vol.staging_path = ""
    vol.publish_context = {}
