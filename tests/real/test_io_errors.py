"""A volume whose writes failed on a full thin pool stays abnormal in both health RPCs.

A volume whose writes failed because the thin pool ran out is abnormal in
both health RPCs, and stays so after the pool has room again (its data may be lost: the
filesystem's writes failed under it).

The kernel's own record is the signal: ext4 counts the writeback errors the loop device
returned (`/sys/fs/ext4/loopN/warning_count`, "I/O error writing to inode") and the errors it
raised itself (`errors_count`, kept in the superblock). The node reads them for
NodeGetVolumeStats and reports them in its heartbeat, which ControllerGetVolume reads."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, in_process
from tests.support import helpers as h

MiB = h.MiB


def _in_use(client: Client, workdir: Path, name: str, size: int) -> tuple[str, Path, Path]:
    cap = h.mount_cap("ext4")
    vol = h.create(client, name, cap, size)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging, target = workdir / f"{name}-staging", workdir / f"{name}-pod" / "mount"
    staging.mkdir()
    h.stage(client, vol, staging, cap, ctx)
    h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
    return vol.volume_id, staging, target


def _write(path: Path, size: int) -> None:
    """Write and sync; a failure is what the pod sees, and is not this test's question."""
    with contextlib.suppress(OSError), open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(os.urandom(MiB))
        f.flush()
        os.fsync(f.fileno())


def _conditions(client: Client, volume_id: str, target: Path) -> list[pb.VolumeCondition]:
    node = client.node.NodeGetVolumeStats(
        pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target))
    ).volume_condition
    controller = client.controller.ControllerGetVolume(
        pb.ControllerGetVolumeRequest(volume_id=volume_id)
    ).status.volume_condition
    return [controller, node]


def test_write_errors_on_a_full_thin_pool_show_in_both_health_rpcs(workdir: Path) -> None:
    """Two thin volumes (64 and 24 MiB) on a 48 MiB tmpfs pool: A fills the pool, then B's
    writes fail. Once the pool is grown it has room again, yet B stays abnormal in both RPCs,
    and the message says I/O errors. Failed on the old code: ControllerGetVolume called B
    normal once the pool had room (it only looked at the pool's free space), and so did
    NodeGetVolumeStats when ext4 counted the failed writes only in warning_count (when ext4 had
    also raised an error, the node's message said nothing of I/O errors or the pool)."""
    pool = workdir / "poolfs"
    pool.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "csihp-thin", str(pool)], check=True)
    flags = ("--pool-dir", str(pool), "--overcommit-ratio", "4", "--fence-interval", "1")
    with in_process(workdir, "drv", *flags) as client:
        _, _, a_target = _in_use(client, workdir, "a", 64 * MiB)
        b, _, b_target = _in_use(client, workdir, "b", 24 * MiB)
        assert not any(c.abnormal for c in _conditions(client, b, b_target))

        _write(a_target / "fill", 60 * MiB)  # the pool runs out under A
        _write(b_target / "data", 16 * MiB)  # B's writes now fail in the loop device
        os.sync()

        # The operator grows the pool: it has room again, and B's lost writes stay lost.
        subprocess.run(["mount", "-o", "remount,size=128m", str(pool)], check=True)
        st = os.statvfs(pool)
        assert st.f_bavail * st.f_frsize > 24 * MiB

        deadline = time.monotonic() + 10  # the controller reads the node's next heartbeat
        while True:
            conditions = _conditions(client, b, b_target)
            if all(c.abnormal for c in conditions) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for side, condition in zip(("controller", "node"), conditions, strict=True):
            assert condition.abnormal, f"{side}: {condition.message}"
            assert "I/O error" in condition.message, f"{side}: {condition.message}"


def test_node_teardown_works_on_a_full_pool_of_its_own(workdir: Path) -> None:
    """The pool on its own 32 MiB tmpfs (the state elsewhere), filled through a volume: the
    kubelet's NodeUnpublish and NodeUnstage still succeed. Failed on 26a61de: NodeUnstage tore
    the volume down, then failed RESOURCE_EXHAUSTED writing the whole heartbeat into the full
    pool, on every retry while the pool stayed full. 77f67bf (per-volume heartbeat files,
    written best-effort by the RPC) fixed it in passing; this keeps it fixed."""
    pool = workdir / "poolfs"
    pool.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "csihp-thin", str(pool)], check=True)
    flags = ("--pool-dir", str(pool), "--overcommit-ratio", "4")
    with in_process(workdir, "drv", *flags) as client:
        volume_id, staging, target = _in_use(client, workdir, "a", 48 * MiB)
        _write(target / "fill", 44 * MiB)
        os.sync()
        assert os.statvfs(pool).f_bavail == 0, "the pool is full"
        h.node_unpublish(client, volume_id, target)
        h.unstage(client, volume_id, staging)
        assert not h.mounted(staging) and not h.mounted(target)
