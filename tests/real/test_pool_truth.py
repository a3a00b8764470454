"""The pool is the truth; sqlite is an index.

A controller that starts on an empty, truncated or mistyped state directory must keep every
backing file, list the volumes again, and restore from the old snapshots. An unknown file is
quarantined, never deleted. A second database can't claim a pool another one owns.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.doctor.pool_checks import check_quarantine
from csi_hostpath.store.backing import file_identity
from csi_hostpath.store.backing.owner import PoolClaimRefused
from tests.conftest import Client, in_process
from tests.support import helpers as h

C = grpc.StatusCode
MiB = h.MiB


def _pool_files(pool: Path) -> list[str]:
    return sorted(
        [p.name for p in (pool / "volumes").glob("vol-*.img")]
        + [p.name for p in (pool / "snapshots").glob("snap-*.img")]
    )


def _listed(client: Client) -> set[str]:
    response = client.controller.ListVolumes(pb.ListVolumesRequest())
    return {e.volume.volume_id for e in response.entries}


def _staged(
    client: Client, workdir: Path, vol: pb.Volume, cap: pb.VolumeCapability, tag: str
) -> Path:
    """Stage vol on node-a at a fresh path; the caller reads or writes there, then unstages."""
    staging = workdir / tag
    staging.mkdir()
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    h.stage(client, vol, staging, cap, ctx)
    return staging


def _release(client: Client, vol: pb.Volume, staging: Path) -> None:
    h.unstage(client, vol.volume_id, staging)
    h.unpublish(client, vol.volume_id, "node-a")


def _rebuild_cli(workdir: Path, state: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "csi_hostpath",
            "state",
            "rebuild",
            "--state-dir",
            str(workdir / f"{state}-state"),
            "--pool-dir",
            str(workdir / "pool"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("loss", ["empty", "truncated", "mistyped"])
def test_controller_on_lost_state_keeps_every_file_and_restores(workdir: Path, loss: str) -> None:
    pool = ["--pool-dir", str(workdir / "pool")]
    cap = h.mount_cap("ext4")
    with in_process(workdir, "a", *pool) as client:
        vol = h.create(client, "data", cap, 32 * MiB)
        raw = h.create(client, "raw", h.block_cap(), 8 * MiB)
        staging = _staged(client, workdir, vol, cap, "st-before")
        payload = h.write_pattern(staging / "f", 256 * 1024)
        _release(client, vol, staging)
        snap = client.controller.CreateSnapshot(
            pb.CreateSnapshotRequest(source_volume_id=vol.volume_id, name="snap")
        ).snapshot
    files = _pool_files(workdir / "pool")
    assert len(files) == 3

    state = "a"
    if loss == "empty":
        shutil.rmtree(workdir / "a-state")
    elif loss == "truncated":
        (workdir / "a-state" / "state.db").write_bytes(b"")
        for suffix in ("-wal", "-shm"):
            (workdir / "a-state" / f"state.db{suffix}").unlink(missing_ok=True)
    else:
        state = "b"  # a typo in --state-dir: another, new database on the same pool
        with pytest.raises(PoolClaimRefused) as refused, in_process(workdir, "b", *pool):
            pass
        assert "csi-hostpath state rebuild" in str(refused.value)
        assert "--take-over" in str(refused.value)
        assert _pool_files(workdir / "pool") == files
        done = _rebuild_cli(workdir, "b", "--take-over")
        assert done.returncode == 0, done.stderr
        assert "3 re-adopted" in done.stdout, done.stdout

    with in_process(workdir, state, *pool) as client:
        assert _pool_files(workdir / "pool") == files, "no backing file was deleted"
        assert {vol.volume_id, raw.volume_id} <= _listed(client)
        listed = client.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries
        assert [e.snapshot.snapshot_id for e in listed] == [snap.snapshot_id]
        restored = h.create(
            client,
            "restored",
            cap,
            32 * MiB,
            volume_content_source=pb.VolumeContentSource(
                snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snap.snapshot_id)
            ),
        )
        staging = _staged(client, workdir, restored, cap, "st-after")
        assert (staging / "f").read_bytes() == payload
        _release(client, restored, staging)
        # The old volume is whole too, and publishable again under a newer token.
        staging = _staged(client, workdir, vol, cap, "st-old")
        assert (staging / "f").read_bytes() == payload
        _release(client, vol, staging)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unknown_file_is_quarantined_not_deleted(workdir: Path) -> None:
    pool = workdir / "pool"
    unknown = pool / "volumes" / f"vol-{'c' * 32}.img"
    unknown_snap = pool / "snapshots" / f"snap-{'d' * 32}.img"
    for path in (unknown, unknown_snap):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"someone's data")
    port = _free_port()
    flags = ["--pool-dir", str(pool), "--metrics-address", f"127.0.0.1:{port}"]
    with in_process(workdir, "q", *flags) as client:
        assert _listed(client) == set()
        kept = pool / "quarantine" / unknown.name
        assert kept.read_bytes() == b"someone's data"
        assert (pool / "quarantine" / unknown_snap.name).read_bytes() == b"someone's data"
        why = json.loads((pool / "quarantine" / f"{unknown.name}.why.json").read_text())
        assert why["file"] == str(unknown) and "no identity" in why["why"]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b"csi_hostpath_quarantined_files 2.0" in body
    finding = check_quarantine(pool)
    assert finding.status == "warn" and unknown.name in finding.detail


def test_a_second_database_is_refused(workdir: Path) -> None:
    pool = ["--pool-dir", str(workdir / "pool")]
    with in_process(workdir, "first", *pool) as first:
        vol = h.create(first, "kept", h.block_cap(), 8 * MiB)
        # While the first controller serves, no other database may claim its pool at all.
        with (
            pytest.raises(PoolClaimRefused, match="serving pool"),
            in_process(workdir, "second", *pool),
        ):
            pass
        assert _listed(first) == {vol.volume_id}
    # Once it stopped, a second database is still refused, and told how to take over.
    with pytest.raises(PoolClaimRefused) as refused, in_process(workdir, "second", *pool):
        pass
    message = str(refused.value)
    assert f"--state-dir {workdir / 'second-state'}" in message
    assert "csi-hostpath state rebuild" in message and "--take-over" in message
    # Without --take-over the rebuild command refuses the same way, and changes nothing.
    done = _rebuild_cli(workdir, "second")
    assert done.returncode == 1 and "--take-over" in done.stderr
    with in_process(workdir, "first", *pool) as first:
        assert _listed(first) == {vol.volume_id}


def test_sidecar_identity_mode(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(file_identity.STORE_ENV, "sidecar")
    pool = workdir / "pool"
    with in_process(workdir, "s", "--pool-dir", str(pool)) as client:
        vol = h.create(client, "side", h.block_cap(), 8 * MiB)
        backing = pool / "volumes" / f"{vol.volume_id}.img"
        sidecar = file_identity.sidecar_path(backing)
        assert json.loads(sidecar.read_text())["name"] == "side"
        assert file_identity.XATTR not in os.listxattr(backing)
        gone = h.create(client, "gone", h.block_cap(), 8 * MiB)
        h.delete(client, gone.volume_id)
        assert not file_identity.sidecar_path(pool / "volumes" / f"{gone.volume_id}.img").exists()
    shutil.rmtree(workdir / "s-state")
    with in_process(workdir, "s", "--pool-dir", str(pool)) as client:
        assert _listed(client) == {vol.volume_id}
        assert sidecar.exists()


def test_identity_is_an_xattr_written_with_the_file(workdir: Path) -> None:
    pool = workdir / "pool"
    with in_process(workdir, "x", "--pool-dir", str(pool)) as client:
        vol = h.create(client, "attr", h.mount_cap("xfs"), 300 * MiB)
        backing = pool / "volumes" / f"{vol.volume_id}.img"
        body = json.loads(os.getxattr(backing, file_identity.XATTR))
        assert (body["kind"], body["id"], body["name"]) == ("volume", vol.volume_id, "attr")
        assert (body["size_bytes"], body["fs_type"], body["access_types"]) == (
            300 * MiB,
            "xfs",
            ["mount"],
        )
        assert not file_identity.sidecar_path(backing).exists()
        assert not file_identity.intent_path(backing).exists(), "the intent is cleared on commit"
