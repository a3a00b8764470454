"""Volume group snapshots on real devices: one consistency point for every member.

A writer counts in two ext4 volumes, always A first and then B, each write synced. Group
snapshots are taken while it runs. In every group, B's counter never runs ahead of A's: the
members were frozen together before any was copied. The member images are read with debugfs,
without mounting them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.support import helpers as h
from tests.support.needs import needs_tools

pytestmark = needs_tools("debugfs")

GROUPS = 6
WRITER = """
import os, sys, time
a, b = sys.argv[1], sys.argv[2]
fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o644) for p in (a, b)]
i = 0
while True:
    i += 1
    for fd in fds:
        os.pwrite(fd, b"%020d" % i, 0)
        os.fsync(fd)
"""


def counter(image: Path) -> int:
    out = subprocess.run(
        ["debugfs", "-R", "cat /counter", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    return int(out or 0)


def test_group_snapshot_members_share_one_consistency_point(spawn: Any, workdir: Path) -> None:
    _, client = spawn("grp")
    cap = h.mount_cap("ext4")
    mounted: list[tuple[str, Path, Path]] = []
    for name in ("a", "b"):
        vol = h.create(client, f"group-{name}", cap, 64 * h.MiB)
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        staging, target = workdir / f"{name}-staging", workdir / f"{name}-target"
        staging.mkdir()
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, vol.volume_id, staging, target, cap)
        mounted.append((vol.volume_id, staging, target))
    (a_id, _, a_target), (b_id, _, b_target) = mounted
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(a_target / "counter"), str(b_target / "counter")]
    )
    groups = []
    try:
        for n in range(GROUPS):
            reply = client.controller_group.CreateVolumeGroupSnapshot(
                pb.CreateVolumeGroupSnapshotRequest(name=f"g{n}", source_volume_ids=[a_id, b_id])
            )
            groups.append(reply.group_snapshot)
    finally:
        writer.kill()
        writer.wait()
    pool = workdir / "grp-state" / "pool" / "snapshots"
    seen = []
    for group in groups:
        by_source = {s.source_volume_id: s for s in group.snapshots}
        assert all(s.group_snapshot_id == group.group_snapshot_id for s in group.snapshots)
        a_count = counter(pool / f"{by_source[a_id].snapshot_id}.img")
        b_count = counter(pool / f"{by_source[b_id].snapshot_id}.img")
        seen.append((a_count, b_count))
        assert b_count <= a_count, f"B ran ahead of A in {group.group_snapshot_id}: {seen}"
    assert seen[-1][0] > 0, f"the writer never wrote: {seen}"
    print(f"(A, B) counters per group: {seen}")

    # A member is deleted with its group, never alone (the spec's INVALID_ARGUMENT).
    member = groups[0].snapshots[0].snapshot_id
    h.expect_code(
        grpc.StatusCode.INVALID_ARGUMENT,
        client.controller.DeleteSnapshot,
        pb.DeleteSnapshotRequest(snapshot_id=member),
    )
    for group in groups:
        client.controller_group.DeleteVolumeGroupSnapshot(
            pb.DeleteVolumeGroupSnapshotRequest(
                group_snapshot_id=group.group_snapshot_id,
                snapshot_ids=[s.snapshot_id for s in group.snapshots],
            )
        )
    assert not list(pool.glob("*.img")), "every member went with its group"
    for volume_id, staging, target in mounted:
        h.node_unpublish(client, volume_id, target)
        h.unstage(client, volume_id, staging)
        h.unpublish(client, volume_id, "node-a")
        h.delete(client, volume_id)
