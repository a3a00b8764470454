"""list, snapshot, snapshots: what exists, and taking a snapshot (CreateSnapshot, as
external-snapshotter's sidecar sends it, then waiting until ready_to_use)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import Any

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.sizes import format_bytes
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.context import Context, volume_named
from csi_hostpath.volume_cli.copywatch import CopyWatch, allocated
from csi_hostpath.volume_cli.exit_codes import EXISTS
from csi_hostpath.volume_cli.kernel import mount_source
from csi_hostpath.volume_cli.output import Progress, snapshot_json, table, volume_json
from csi_hostpath.volume_cli.records import SnapshotRecord, VolumeRecord

READY_TIMEOUT = 3600.0


def _pages(fetch: Callable[[str], Any]) -> Iterator[Any]:
    token = ""
    while True:
        answer = fetch(token)
        yield from answer.entries
        token = answer.next_token
        if not token:
            return


def _allocated(ctx: Context, volume_id: str) -> int | None:
    """The backing file's allocated bytes (st_blocks): what the volume really costs the pool."""
    return allocated(ctx.places.pool_dir / "volumes" / f"{volume_id}.img")


def list_volumes(ctx: Context, args: argparse.Namespace) -> int:
    driver = ctx.driver
    records = ctx.records.read()
    listed = {
        e.volume.volume_id: e
        for e in _pages(
            lambda token: driver.call(
                driver.controller.ListVolumes,
                pb.ListVolumesRequest(starting_token=token),
                "ListVolumes",
            )
        )
    }
    known = {v.volume_id for v in records.volumes.values()}
    # Volumes made by something else (Kubernetes, `demo`) are shown too, without a name:
    # the driver is the truth, this command's records only name things.
    strangers = [
        VolumeRecord(
            name="",
            volume_id=vid,
            fs=e.volume.volume_context.get("fsType", "") or "",
            mode="",
            capacity_bytes=e.volume.capacity_bytes,
        )
        for vid, e in sorted(listed.items())
        if vid not in known
    ]
    items = []
    behind: list[str] = []
    for vol in [*sorted(records.volumes.values(), key=lambda v: v.name), *strangers]:
        entry = listed.get(vol.volume_id)
        item = volume_json(vol)
        health = {"abnormal": False, "message": ""}
        if entry is None:
            health = {
                "abnormal": True,
                "message": "the driver has no such volume; `delete` it here to forget it",
            }
        else:
            item["capacity_bytes"] = entry.volume.capacity_bytes
            cond = entry.status.volume_condition
            health = {"abnormal": cond.abnormal, "message": cond.message}
        item["allocated_bytes"] = _allocated(ctx, vol.volume_id)
        item["used_bytes"] = None
        item["published_nodes"] = list(entry.status.published_node_ids) if entry else []
        for m in vol.mounts:
            if mount_source(m.path) is None:
                health = {"abnormal": True, "message": f"{m.path} is no longer mounted"}
        if vol.mounts and entry is not None and not health["abnormal"]:
            stats = driver.call(
                driver.node.NodeGetVolumeStats,
                pb.NodeGetVolumeStatsRequest(
                    volume_id=vol.volume_id, volume_path=vol.mounts[0].path
                ),
                "NodeGetVolumeStats",
            )
            in_bytes = [u for u in stats.usage if u.unit == pb.VolumeUsage.BYTES]
            # A raw block device has no filesystem to count what is used: the driver reports
            # its size alone (used 0), which would read as empty. Its allocated bytes are known.
            if in_bytes and vol.fs != "block":
                item["used_bytes"] = in_bytes[0].used
            if vol.fs_behind and in_bytes and in_bytes[0].total:
                behind.append(
                    f"{vol.name}: {format_bytes(item['capacity_bytes'])}, but its mounted "
                    f"filesystem is {format_bytes(in_bytes[0].total)} (what df shows) until it is "
                    f"mounted again: unmount {vol.mounts[0].path} and mount it again"
                )
            if stats.volume_condition.abnormal:
                health = {"abnormal": True, "message": stats.volume_condition.message}
        item["health"] = health
        items.append(item)
    rows = [
        [
            i["name"] or "(not created here)",
            i["fs"] or "-",
            format_bytes(i["capacity_bytes"]),
            format_bytes(i["allocated_bytes"]),
            format_bytes(i["used_bytes"]),
            ",".join(m["path"] for m in i["mounts"]) or "-",
            f"abnormal: {i['health']['message']}" if i["health"]["abnormal"] else "ok",
        ]
        for i in items
    ]
    human = (
        table(["name", "fs", "size", "allocated", "used", "mounted at", "health"], rows)
        if rows
        else "no volumes; create one with `csi-hostpath volume create NAME --size 1Gi`"
    )
    ctx.out.result(items, "\n".join([human, *behind]))
    return 0


def _wait_ready(ctx: Context, snapshot_id: str, progress: Progress) -> bool:
    """A driver may answer CreateSnapshot before the copy is done (ready_to_use false); poll
    ListSnapshots for that ID until it is ready."""
    driver = ctx.driver
    start = time.monotonic()
    while time.monotonic() - start < READY_TIMEOUT:
        entries = driver.call(
            driver.controller.ListSnapshots,
            pb.ListSnapshotsRequest(snapshot_id=snapshot_id),
            "ListSnapshots",
        ).entries
        if entries and entries[0].snapshot.ready_to_use:
            return True
        progress.tick(time.monotonic() - start + 1)
        time.sleep(0.5)
    return False


def snapshot(ctx: Context, args: argparse.Namespace) -> int:
    with ctx.records.locked() as records:
        vol = volume_named(records, args.name)
        if args.snapshot in records.snapshots or args.snapshot in records.volumes:
            raise CliError(
                EXISTS,
                f"the name {args.snapshot!r} is taken",
                f"pick another name, or `csi-hostpath volume delete {args.snapshot}` first",
            )
        driver = ctx.driver
        pool = ctx.places.pool_dir
        watch = CopyWatch(pool / "volumes" / f"{vol.volume_id}.img", pool / "snapshots")
        progress = ctx.out.progress(f"snapshotting {vol.name}", watch.detail)
        try:
            snap = driver.call_waiting(
                driver.controller.CreateSnapshot,
                pb.CreateSnapshotRequest(
                    source_volume_id=vol.volume_id, name=ctx.csi_name(args.snapshot)
                ),
                "CreateSnapshot",
                progress.tick,
            ).snapshot
            ready = snap.ready_to_use or _wait_ready(ctx, snap.snapshot_id, progress)
        finally:
            progress.done()
        record = SnapshotRecord(
            name=args.snapshot,
            snapshot_id=snap.snapshot_id,
            source_volume=vol.name,
            source_volume_id=vol.volume_id,
            size_bytes=snap.size_bytes,
            fs=vol.fs,
            created_at=snap.creation_time.ToNanoseconds() / 1e9,
        )
        records.snapshots[args.snapshot] = record
    ctx.out.result(
        snapshot_json(record, ready),
        f"snapshot {args.snapshot} of {vol.name}: {format_bytes(record.size_bytes)}"
        f"{'' if ready else ' (not ready yet)'} ({record.snapshot_id})\n"
        f"next: csi-hostpath volume create NEW --from-snapshot {args.snapshot}",
    )
    return 0


def list_snapshots(ctx: Context, args: argparse.Namespace) -> int:
    driver = ctx.driver
    records = ctx.records.read()
    listed = {
        e.snapshot.snapshot_id: e.snapshot
        for e in _pages(
            lambda token: driver.call(
                driver.controller.ListSnapshots,
                pb.ListSnapshotsRequest(starting_token=token),
                "ListSnapshots",
            )
        )
    }
    items = []
    for rec in sorted(records.snapshots.values(), key=lambda s: s.name):
        found = listed.get(rec.snapshot_id)
        items.append(snapshot_json(rec, bool(found and found.ready_to_use)))
    known = {s.snapshot_id for s in records.snapshots.values()}
    for sid, s in sorted(listed.items()):
        if sid not in known:
            stranger = SnapshotRecord(
                "", sid, "", s.source_volume_id, s.size_bytes, "", s.creation_time.seconds
            )
            items.append(snapshot_json(stranger, s.ready_to_use))
    rows = [
        [
            i["name"] or "(not created here)",
            i["source_volume"] or i["source_volume_id"],
            format_bytes(i["size_bytes"]),
            "yes" if i["ready_to_use"] else "no",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(i["created_at"])),
        ]
        for i in items
    ]
    human = (
        table(["name", "source", "size", "ready", "created"], rows)
        if rows
        else "no snapshots; take one with `csi-hostpath volume snapshot VOLUME NAME`"
    )
    ctx.out.result(items, human)
    return 0
