"""Safety flags must be finite, seen through real driver processes.

Safety flags must be finite, seen through real driver processes: `ledger force-detach
--node-grace nan` against a live node that holds a volume is refused and the hold stays, and
`serve --heartbeat-interval nan` (or inf) exits at once instead of spinning. The parser's and the
ledger's rules: tests/unit/test_flags_finite.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.support import helpers as h

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


def test_a_nan_grace_never_revokes_a_live_node(spawn: Any, workdir: Path) -> None:
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
def test_serve_with_a_non_finite_heartbeat_exits_at_once(workdir: Path, value: str) -> None:
    out = _cli(
        "serve", "--endpoint", f"unix://{workdir}/x.sock", "--node-id", "n",
        "--state-dir", str(workdir / "x-state"), "--heartbeat-interval", value,
        timeout=20,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "finite" in out.stderr
    assert not (workdir / "x.sock").exists()
