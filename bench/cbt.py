"""(g) Changed-block tracking and group snapshots.

Delta: a 10 GiB block volume with 1 GiB written, a snapshot, 100 MiB changed (100 blocks of 1 MiB
at scattered offsets, some in the written part, some in its holes), a second snapshot, then
GetMetadataDelta streamed to the end. Once on the default ext4 pool (snapshots are copies) and once
on a loop-mounted xfs pool made with reflink (snapshots share extents). The floor is what a
driver without extent knowledge must do for the same answer: read every allocated block of both
snapshots. The answer is checked: it must be exactly the 100 MiB that changed.

Group: four 1 GiB ext4 volumes, each mounted with 64 MiB written, snapshotted as one group
(every member frozen, then copied), against the floor of four separate CreateSnapshot calls.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.harness import GiB, MiB, Plugin, Stubs
from bench.snapshot import _in_use
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.client.csi_requests import block_cap, mount_cap
from csi_hostpath.system.extents import data_extents

VOLUME = 10 * GiB
BASE = 1 * GiB
CHANGED_BLOCKS = 100
CHANGE = 1 * MiB
GROUP_MEMBERS = 4
GROUP_WRITTEN = 64 * MiB


@contextlib.contextmanager
def _xfs_reflink_pool(root: Path) -> Iterator[Path]:
    image, mountpoint = root / "xfs.img", root / "xfs"
    root.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as handle:
        handle.truncate(4 * VOLUME)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mountpoint.mkdir(exist_ok=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
    try:
        yield mountpoint / "pool"
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)
        image.unlink(missing_ok=True)


@contextlib.contextmanager
def _block_volume(stubs: Stubs, work: Path, node_id: str) -> Iterator[tuple[str, Path]]:
    cap = block_cap()
    vid = stubs.controller.CreateVolume(rq.create_volume("cbt", cap, VOLUME)).volume.volume_id
    staging, target = work / "staging", work / "pod" / "dev"
    staging.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)  # as the kubelet does
    ctx = dict(
        stubs.controller.ControllerPublishVolume(
            rq.controller_publish(vid, node_id, cap)
        ).publish_context
    )
    try:
        stubs.node.NodeStageVolume(rq.node_stage(vid, staging, cap, ctx))
        stubs.node.NodePublishVolume(
            rq.node_publish(vid, staging, target, cap, publish_context=ctx)
        )
        yield vid, target
    finally:
        with contextlib.suppress(Exception):
            stubs.node.NodeUnpublishVolume(rq.node_unpublish(vid, target))
        with contextlib.suppress(Exception):
            stubs.node.NodeUnstageVolume(rq.node_unstage(vid, staging))
        with contextlib.suppress(Exception):
            stubs.controller.ControllerUnpublishVolume(rq.controller_unpublish(vid, node_id))
        stubs.controller.DeleteVolume(rq.delete_volume(vid))


def _write(device: Path, offsets: list[int], size: int) -> None:
    chunk = bytearray(os.urandom(size))
    fd = os.open(device, os.O_WRONLY)
    try:
        for n, offset in enumerate(offsets):
            chunk[:8] = n.to_bytes(8, "little")
            os.pwrite(fd, chunk, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_all_data(paths: list[Path]) -> float:
    """The floor: read every allocated block of each file."""
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            for offset, length in data_extents(path):
                for at in range(offset, offset + length, 4 * MiB):
                    os.pread(fd, min(4 * MiB, offset + length - at), at)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def _delta_on(pool: str, work: Path, node_id: str) -> dict[str, Any]:
    with ExitStack() as stack:
        plugin = Plugin(work / "plugin", node_id)
        if pool == "xfs-reflink":
            plugin.pool = stack.enter_context(_xfs_reflink_pool(work / "xfs"))
        stubs = plugin.start()
        stack.callback(plugin.stop)
        stack.callback(stubs.close)
        snapshots = pb_grpc.SnapshotMetadataStub(stubs.channel)
        vid, device = stack.enter_context(_block_volume(stubs, work, node_id))
        _write(device, list(range(0, BASE, 4 * MiB)), 4 * MiB)
        base = stubs.controller.CreateSnapshot(rq.create_snapshot("base", vid)).snapshot
        stack.callback(
            lambda: stubs.controller.DeleteSnapshot(rq.delete_snapshot(base.snapshot_id))
        )
        offsets = sorted(random.Random(7).sample(range(0, VOLUME, CHANGE), CHANGED_BLOCKS))
        _write(device, offsets, CHANGE)
        nxt = stubs.controller.CreateSnapshot(rq.create_snapshot("next", vid)).snapshot
        stack.callback(lambda: stubs.controller.DeleteSnapshot(rq.delete_snapshot(nxt.snapshot_id)))

        start = time.perf_counter()
        reported = [
            (b.byte_offset, b.size_bytes)
            for message in snapshots.GetMetadataDelta(
                pb.GetMetadataDeltaRequest(
                    base_snapshot_id=base.snapshot_id, target_snapshot_id=nxt.snapshot_id
                )
            )
            for b in message.block_metadata
        ]
        seconds = time.perf_counter() - start
        files = [plugin.pool_dir / "snapshots" / f"{s.snapshot_id}.img" for s in (base, nxt)]
        floor_seconds = _read_all_data(files)
        covered = {at // CHANGE for off, n in reported for at in range(off, off + n, CHANGE)}
        return {
            "seconds": seconds,
            "floor_seconds": floor_seconds,
            "changed_bytes": CHANGED_BLOCKS * CHANGE,
            "reported_bytes": sum(n for _, n in reported),
            "exact": covered == {o // CHANGE for o in offsets}
            and sum(n for _, n in reported) == CHANGED_BLOCKS * CHANGE,
        }
    raise AssertionError("unreachable")


def changed_blocks(work: Path, node_id: str) -> dict[str, Any]:
    results = {}
    for pool in ("ext4", "xfs-reflink"):
        results[pool] = _delta_on(pool, work / pool, node_id)
        # These plugins are this section's own: their state goes, but a volume or snapshot file
        # left in their pool is a leak, and fails the figure.
        root = work / pool / "plugin"
        left = [str(p) for p in (root / "state" / "pool").rglob("*.img")]
        if left:
            raise RuntimeError(f"the {pool} run left files in its pool: {left}")
        shutil.rmtree(root)
    return results


def group_snapshot(stubs: Stubs, work: Path, node_id: str) -> dict[str, Any]:
    groups = pb_grpc.GroupControllerStub(stubs.channel)
    cap = mount_cap("ext4")
    with ExitStack() as stack:
        ids = []
        for n in range(GROUP_MEMBERS):
            volume = stubs.controller.CreateVolume(rq.create_volume(f"member-{n}", cap, GiB)).volume
            stack.callback(stubs.controller.DeleteVolume, rq.delete_volume(volume.volume_id))
            target = stack.enter_context(_in_use(stubs, work, node_id, volume, f"member-{n}"))
            _write_file(target / "data.bin", GROUP_WRITTEN)
            ids.append(volume.volume_id)

        start = time.perf_counter()
        singles = [
            stubs.controller.CreateSnapshot(rq.create_snapshot(f"single-{v}", v)).snapshot
            for v in ids
        ]
        floor_seconds = time.perf_counter() - start
        for snap in singles:
            stubs.controller.DeleteSnapshot(rq.delete_snapshot(snap.snapshot_id))

        start = time.perf_counter()
        group = groups.CreateVolumeGroupSnapshot(
            pb.CreateVolumeGroupSnapshotRequest(name="bench-group", source_volume_ids=ids)
        ).group_snapshot
        seconds = time.perf_counter() - start
        groups.DeleteVolumeGroupSnapshot(
            pb.DeleteVolumeGroupSnapshotRequest(
                group_snapshot_id=group.group_snapshot_id,
                snapshot_ids=[s.snapshot_id for s in group.snapshots],
            )
        )
        return {
            "members": GROUP_MEMBERS,
            "seconds": seconds,
            "floor_seconds": floor_seconds,
            "snapshots": len(group.snapshots),
        }
    raise AssertionError("unreachable")


def _write_file(path: Path, size: int) -> None:
    chunk = os.urandom(4 * MiB)
    with open(path, "wb") as handle:
        for _ in range(size // len(chunk)):
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
