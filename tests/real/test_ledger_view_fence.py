"""The ledger view on real processes, through a hold, its force-detach and the fence.

The ledger view (--ledger-view) on real processes, through a hold, its force-detach and the
fence: one controller serving the view on its metrics address, a node plugin in its own mount
namespace. What `kubectl csi-hostpath why` reads of a fenced node is in the view: the holder and
its staging while it holds, then the force-detach and the node's `fenced` row, and no staging."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support import helpers as h
from tests.support.processes import UNSHARE, free_port, ledger_cli, mount_points, wait_for

GRACE = "2"


def _view(port: int, volume_id: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/ledger/v1/volumes/{volume_id}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        view: dict[str, Any] = json.loads(answer.read())
    return view


def test_the_view_follows_a_hold_its_force_detach_and_the_fence(spawn: Any, workdir: Path) -> None:
    port = free_port()
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    beat = ["--heartbeat-interval", "0.3", "--node-grace", GRACE]
    view_flags = ["--metrics-address", f"127.0.0.1:{port}", "--ledger-view"]
    _ctrl, ctrl = spawn(
        "ctrl", "--mode", "controller", *shared, *beat, *view_flags, node_id="controller"
    )
    flags = ["--mode", "node", *shared, *beat, "--fence-interval", "1"]
    a_proc, a = spawn("node-a", *flags, node_id="node-a", prefix=UNSHARE)
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "viewed", cap, 32 * h.MiB)
    vid = vol.volume_id
    ctx = h.publish(ctrl, vid, "node-a", cap)
    staging = workdir / "a" / "globalmount"
    staging.mkdir(parents=True)
    h.stage(a, vol, staging, cap, ctx)

    view = _view(port, vid)
    [holder] = view["holders"]
    [staged] = view["stagings"]
    assert (holder["node"], holder["silent"], holder["generation"]) == ("node-a", False, 1)
    assert (staged["node"], staged["staging"], staged["generation"]) == ("node-a", str(staging), 1)
    assert holder["since"] <= staged["staged_at"] <= time.time()

    a_proc.kill(signal.SIGSTOP)
    wait_for(lambda: _view(port, vid)["holders"][0]["silent"], 10, "node-a silent in the view")
    reason = ["--node", "node-a", "--reason", "powered off", "--node-grace", GRACE]
    forced = ledger_cli(workdir, "force-detach", vid, *reason)
    assert forced.returncode == 0, forced
    view = _view(port, vid)
    assert view["holders"] == []
    assert [(r["action"], r["node"]) for r in view["audit"]][-1] == ("force-detach", "node-a")

    a_proc.kill(signal.SIGCONT)
    assert a_proc.proc is not None
    wait_for(lambda: str(staging) not in mount_points(a_proc.proc.pid), 10, "node-a's fence")

    def fenced() -> bool:
        rows = [(r["action"], r["node"]) for r in _view(port, vid)["audit"]]
        return ("fenced", "node-a") in rows

    # The controller's loop imports the node's fence event; the view itself writes nothing.
    wait_for(fenced, 10, "the fenced row in the view")
    assert _view(port, vid)["stagings"] == []
    h.delete(ctrl, vid)
