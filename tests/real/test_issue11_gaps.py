"""Issue 11, the parts of cases 9 and 13 that had only unit or fake-layer tests, on real devices
and real driver processes (the audit in docs/reliability.md maps every case to its tests):

- case 9: `ledger force-detach --node-grace nan` against a live node that holds a volume is
  refused and the hold stays; `serve --heartbeat-interval nan` exits at once instead of
  spinning;
- case 13: ControllerExpandVolume past a real pool (a small tmpfs) is OUT_OF_RANGE, not
  RESOURCE_EXHAUSTED; an inline volume whose size has 5,000 digits is INVALID_ARGUMENT, not
  INTERNAL, and leaves nothing behind.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests import helpers as h
from tests.conftest import in_process, on_small_pool
from tests.kernel import loops_backed_under
from tests.real.test_inline import inline_request

C = grpc.StatusCode
MiB = h.MiB


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "csi_hostpath", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_case9_nan_grace_never_revokes_a_live_node(spawn: Any, workdir: Path) -> None:
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    _, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    spawn("node", "--mode", "node", *shared, "--heartbeat-interval", "0.2")  # the live holder
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "held", cap, 16 * MiB)
    h.publish(ctrl, vol.volume_id, "node-a", cap)
    dirs = ["--state-dir", str(workdir / "ctrl-state"), "--pool-dir", str(workdir / "pool")]
    out = _cli(
        "ledger", "force-detach", vol.volume_id, "--node", "node-a", "--reason", "test",
        "--node-grace", "nan", *dirs,
    )  # fmt: skip
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "finite" in out.stderr
    listed = _cli("ledger", "list", *dirs)
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.split()[:2] == [vol.volume_id, "node-a"] for line in listed.stdout.splitlines()
    ), listed.stdout
    response = ctrl.controller.ListVolumes(pb.ListVolumesRequest())
    held = {e.volume.volume_id: list(e.status.published_node_ids) for e in response.entries}
    assert held[vol.volume_id] == ["node-a"]


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_case9_serve_with_a_nan_heartbeat_exits_at_once(workdir: Path, value: str) -> None:
    out = _cli(
        "serve", "--endpoint", f"unix://{workdir}/x.sock", "--node-id", "n",
        "--state-dir", str(workdir / "x-state"), "--heartbeat-interval", value,
        timeout=20,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "finite" in out.stderr
    assert not (workdir / "x.sock").exists()


def test_case13_expansion_past_a_real_pool_is_out_of_range(workdir: Path) -> None:
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


def test_case13_inline_size_of_5000_digits_is_invalid_argument(workdir: Path) -> None:
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
