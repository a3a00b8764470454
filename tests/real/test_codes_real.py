"""The spec's codes where a real pool, real processes or real devices give them.

The spec's codes where a real pool, real processes or real devices give them: expansion past
a small tmpfs pool is OUT_OF_RANGE, not RESOURCE_EXHAUSTED, and never grows the file part way;
new work below the pool's reserve is RESOURCE_EXHAUSTED while teardown still works; an inline
volume whose size has 5,000 digits is INVALID_ARGUMENT and leaves nothing behind; a corrupt
state.db makes `serve` exit 1 naming the file and the rebuild, without a traceback. The rules
themselves, on the fake layer: tests/unit/test_codes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import in_process, on_small_pool
from tests.real.test_inline import inline_request
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under

C = grpc.StatusCode
MiB = h.MiB


def test_expansion_past_a_real_pool_is_out_of_range(workdir: Path) -> None:
    with on_small_pool(workdir, "exp", 64) as (client, pool):
        vol = h.create(client, "grow", h.block_cap(), 8 * MiB)
        request = pb.ControllerExpandVolumeRequest(
            volume_id=vol.volume_id, capacity_range=pb.CapacityRange(required_bytes=1 << 30)
        )
        err = h.expect_code(C.OUT_OF_RANGE, client.controller.ControllerExpandVolume, request)
        assert err.details()
        # Never a partial grow: the file keeps its size, and a fitting expansion still works.
        backing = pool / "volumes" / f"{vol.volume_id}.img"
        assert backing.stat().st_size == 8 * MiB
        request.capacity_range.required_bytes = 16 * MiB
        grown = client.controller.ControllerExpandVolume(request)
        assert grown.capacity_bytes >= 16 * MiB
        h.delete(client, vol.volume_id)


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


def test_an_inline_size_of_5000_digits_is_invalid_argument(workdir: Path) -> None:
    target = workdir / "pod" / "inline"
    target.parent.mkdir(parents=True)
    name = f"csi-{uuid.uuid4().hex}"
    with in_process(workdir, "i", "--allow-inline-volumes") as client:
        request = inline_request(target, size="9" * 5000, name=name)
        err = h.expect_code(C.INVALID_ARGUMENT, client.node.NodePublishVolume, request)
        assert len(err.details() or "") < 1000, "the answer does not echo 5,000 digits"
    assert not h.mounted(target)
    assert not loops_backed_under(workdir)
    pool = workdir / "i-state" / "pool"
    assert not [p for p in pool.rglob("*.img*") if name in p.name or p.suffix == ".tmp"]


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
