"""Changed-block tracking on real devices: the SnapshotMetadata service's answers are exact.

Write a pattern, snapshot, write three ranges, snapshot again: the delta is exactly those ranges
rounded out to 4 KiB blocks. Once on the default pool (ext4: snapshots are copies) and once on an
xfs pool made with reflink (snapshots share extents, and shared ones are never read)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.core.byte_ranges import align
from tests.support import helpers as h
from tests.support.needs import needs_tools

BASE_DATA = 16 * h.MiB
# (offset, length): inside the base's data, past it (a hole in the base), across a block edge.
WRITES = [(h.MiB + 512, 3000), (20 * h.MiB, 8192), (50 * h.MiB - 100, 200)]


def xfs_pool(workdir: Path) -> Path:
    image, mountpoint = workdir / "xfs.img", workdir / "xfs"
    with open(image, "wb") as f:
        f.truncate(1 << 30)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mountpoint.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
    return mountpoint / "pool"


def ranges(stream: Iterable[Any]) -> list[tuple[int, int]]:
    return [(b.byte_offset, b.size_bytes) for msg in stream for b in msg.block_metadata]


def write_at(device: Path, offset: int, data: bytes) -> None:
    fd = os.open(device, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "pool", ["ext4", pytest.param("xfs-reflink", marks=needs_tools("mkfs.xfs"))]
)
def test_delta_is_exactly_the_written_blocks(spawn: Any, workdir: Path, pool: str) -> None:
    extra = ["--pool-dir", str(xfs_pool(workdir))] if pool == "xfs-reflink" else []
    _, client = spawn("cbt", *extra)
    metadata = pb_grpc.SnapshotMetadataStub(client.channel)
    vid, staging, target = h.block_in_use(client, workdir, "tracked", 64 * h.MiB)
    snaps = []
    try:
        write_at(target, 0, os.urandom(BASE_DATA))
        snaps.append(h_snapshot(client, vid, "base"))
        for offset, length in WRITES:
            write_at(target, offset, os.urandom(length))
        snaps.append(h_snapshot(client, vid, "next"))
        base, nxt = snaps

        allocated = ranges(
            metadata.GetMetadataAllocated(pb.GetMetadataAllocatedRequest(snapshot_id=base))
        )
        assert allocated == [(0, BASE_DATA)]

        request = pb.GetMetadataDeltaRequest(base_snapshot_id=base, target_snapshot_id=nxt)
        delta = ranges(metadata.GetMetadataDelta(request))
        assert delta == align(WRITES), f"{pool}: {delta}"

        # Paged one tuple a message, and resumable from an offset.
        paged = list(
            metadata.GetMetadataDelta(
                pb.GetMetadataDeltaRequest(
                    base_snapshot_id=base, target_snapshot_id=nxt, max_results=1
                )
            )
        )
        assert [len(m.block_metadata) for m in paged] == [1, 1, 1]
        assert {m.volume_capacity_bytes for m in paged} == {64 * h.MiB}
        resumed = pb.GetMetadataDeltaRequest(
            base_snapshot_id=base, target_snapshot_id=nxt, starting_offset=20 * h.MiB + 8192
        )
        assert ranges(metadata.GetMetadataDelta(resumed)) == align(WRITES)[2:]

        with pytest.raises(grpc.RpcError) as info:
            list(
                metadata.GetMetadataDelta(
                    pb.GetMetadataDeltaRequest(
                        base_snapshot_id=base, target_snapshot_id=nxt, starting_offset=1 << 40
                    )
                )
            )
        assert info.value.code() == grpc.StatusCode.OUT_OF_RANGE
    finally:
        for snap in snaps:
            client.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snap))
        h.release(client, vid, staging, target)


def h_snapshot(client: Any, volume_id: str, name: str) -> str:
    reply = client.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=volume_id, name=name)
    )
    return str(reply.snapshot.snapshot_id)
