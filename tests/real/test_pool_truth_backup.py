"""The pool is the truth when the state directory comes back from an old backup.

The pool is the truth when the state directory comes back from an old backup, on real devices
and a real driver: a controller whose state directory is restored from a backup taken before a
volume was made (and published) keeps that volume's file, lists it again, reads its data back,
and never hands out its fencing token a second time. The other variants (empty, truncated,
mistyped) are in tests/real/test_pool_truth.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.context_keys import GENERATION_KEY
from tests.conftest import in_process
from tests.real.test_pool_truth import _listed, _pool_files, _release, _staged
from tests.support import helpers as h

MiB = h.MiB


def test_controller_restored_from_an_old_backup_keeps_newer_volumes(workdir: Path) -> None:
    pool = ["--pool-dir", str(workdir / "pool")]
    cap = h.mount_cap("ext4")
    state, backup = workdir / "a-state", workdir / "backup"
    with in_process(workdir, "a", *pool) as client:
        old = h.create(client, "old", cap, 32 * MiB)
    shutil.copytree(state, backup)  # the backup: only "old" in it

    with in_process(workdir, "a", *pool) as client:
        new = h.create(client, "new", cap, 32 * MiB)
        staging = _staged(client, workdir, new, cap, "st-new")
        payload = h.write_pattern(staging / "f", 256 * 1024)
        _release(client, new, staging)
        # Published twice since the backup: the lease holds a token the backup never saw.
        ctx = h.publish(client, new.volume_id, "node-a", cap)
        h.unpublish(client, new.volume_id, "node-a")
        issued = int(ctx[GENERATION_KEY])
        snap = client.controller.CreateSnapshot(
            pb.CreateSnapshotRequest(source_volume_id=new.volume_id, name="after-backup")
        ).snapshot
    files = _pool_files(workdir / "pool")

    shutil.rmtree(state)
    shutil.copytree(backup, state)  # the restore
    with in_process(workdir, "a", *pool) as client:
        assert _pool_files(workdir / "pool") == files, "no backing file was deleted"
        assert {old.volume_id, new.volume_id} <= _listed(client)
        snaps = client.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries
        assert [e.snapshot.snapshot_id for e in snaps] == [snap.snapshot_id]
        ctx = h.publish(client, new.volume_id, "node-a", cap)
        assert int(ctx[GENERATION_KEY]) > issued, "a fencing token was handed out twice"
        h.unpublish(client, new.volume_id, "node-a")
        staging = _staged(client, workdir, new, cap, "st-after")
        assert (staging / "f").read_bytes() == payload
        _release(client, new, staging)


def test_a_volume_deleted_since_the_backup_is_reported_and_never_published(
    workdir: Path,
) -> None:
    """The mirror case: the backup still has a record whose file was deleted since. The record
    is listed abnormal (its file is missing), ControllerPublish answers NOT_FOUND (it used to
    answer OK, and the node's stage then failed), and DeleteVolume clears it."""
    pool = ["--pool-dir", str(workdir / "pool")]
    cap = h.mount_cap("ext4")
    state, backup = workdir / "a-state", workdir / "backup"
    with in_process(workdir, "a", *pool) as client:
        gone = h.create(client, "gone", cap, 32 * MiB)
    shutil.copytree(state, backup)
    with in_process(workdir, "a", *pool) as client:
        h.delete(client, gone.volume_id)
    shutil.rmtree(state)
    shutil.copytree(backup, state)
    with in_process(workdir, "a", *pool) as client:
        entries = client.controller.ListVolumes(pb.ListVolumesRequest()).entries
        condition = {e.volume.volume_id: e.status.volume_condition for e in entries}
        assert condition[gone.volume_id].abnormal
        assert "missing" in condition[gone.volume_id].message
        err = h.expect_code(
            grpc.StatusCode.NOT_FOUND, h.publish, client, gone.volume_id, "node-a", cap
        )
        assert "backing file" in (err.details() or "")
        h.delete(client, gone.volume_id)
        assert gone.volume_id not in _listed(client)
