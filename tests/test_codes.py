"""Issue 11 case 13: the spec's codes, and errors that name the next step.

- a full disk (ENOSPC, EDQUOT, sqlite's "database or disk is full") → RESOURCE_EXHAUSTED, not
  INTERNAL;
- ControllerExpandVolume past what the pool can hold → OUT_OF_RANGE ("Unsupported capacity" in
  CSI spec.md's ControllerExpandVolume errors table);
- new work below the pool's reserve → RESOURCE_EXHAUSTED;
- a corrupt state.db → `serve` exits 1 with a message naming the file and `state rebuild`."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.api.status import status_of
from tests import helpers as h
from tests.conftest import Client, on_small_pool

MiB = 1 << 20
C = grpc.StatusCode


@pytest.mark.parametrize(
    "exc",
    [
        sqlite3.OperationalError("database or disk is full"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
    ids=["sqlite-full", "enospc", "edquot"],
)
def test_disk_full_is_resource_exhausted(exc: Exception) -> None:
    assert status_of(exc) == C.RESOURCE_EXHAUSTED


def test_other_oserrors_stay_internal() -> None:
    assert status_of(OSError(errno.EIO, "I/O error")) == C.INTERNAL


@pytest.mark.real
def test_expand_past_the_pool_is_out_of_range(fake_driver: Client) -> None:
    vol = h.create(fake_driver, "e", h.block_cap(), 8 * MiB)
    req = pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume_id, capacity_range=pb.CapacityRange(required_bytes=1 << 30)
    )
    h.expect_code(C.OUT_OF_RANGE, fake_driver.controller.ControllerExpandVolume, req)


@pytest.mark.real
def test_new_work_is_refused_below_the_pool_reserve(workdir: Path) -> None:
    with on_small_pool(workdir, "rsv", 32) as (client, pool):
        vol = h.create(client, "a", h.block_cap(), 4 * MiB)
        st = os.statvfs(pool)
        leave = 4 * MiB  # less than the reserve, more than the volume asked for next
        with open(pool / "filler", "wb") as f:
            f.write(b"\x01" * (st.f_bavail * st.f_frsize - leave))
        err = h.expect_code(C.RESOURCE_EXHAUSTED, h.create, client, "b", h.block_cap(), MiB)
        assert "teardown" in (err.details() or "")
        snap = pb.CreateSnapshotRequest(source_volume_id=vol.volume_id, name="s")
        h.expect_code(C.RESOURCE_EXHAUSTED, client.controller.CreateSnapshot, snap)
        h.delete(client, vol.volume_id)  # teardown is never refused


@pytest.mark.real
def test_corrupt_state_db_names_the_file_and_the_rebuild(workdir: Path) -> None:
    state = workdir / "c-state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a sqlite database" * 200)
    args = ["serve", "--endpoint", f"unix://{workdir}/c.sock", "--state-dir", str(state)]
    out = subprocess.run(
        [sys.executable, "-m", "csi_hostpath", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert str(state / "state.db") in out.stderr
    assert "csi-hostpath state rebuild" in out.stderr
    assert "Traceback" not in out.stderr
