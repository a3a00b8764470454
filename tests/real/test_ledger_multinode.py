"""Multi-attach is refused until an operator force-detaches, on real processes.

Multi-attach refused until an operator force-detaches, for real: one controller and two node
plugins, each node in its own mount namespace, sharing one pool. node-a holds a volume and
freezes; the attach to node-b waits until an operator force-detaches; node-a fences itself when
it thaws."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc

from tests.support import helpers as h
from tests.support.kernel import loops_backed_under
from tests.support.processes import UNSHARE, ledger_cli, mount_points, wait_for

C = grpc.StatusCode


def in_namespace(pid: int, script: str) -> str:
    out = subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_multi_attach_refused_force_detach_and_fencing(spawn: Any, workdir: Path) -> None:
    pool = str(workdir / "pool")
    shared = ["--pool-scope", "shared", "--pool-dir", pool]
    _ctrl_proc, ctrl = spawn(
        "ctrl", "--mode", "controller", *shared, "--heartbeat-interval", "0.3", node_id="controller"
    )
    # Every plugin gets the grace period the operator's force-detach below uses.
    node_flags = [
        "--mode",
        "node",
        *shared,
        "--fence-interval",
        "1",
        "--heartbeat-interval",
        "0.3",
        "--node-grace",
        "3",
    ]
    a_proc, a = spawn("node-a", *node_flags, node_id="node-a", prefix=UNSHARE)
    b_proc, b = spawn("node-b", *node_flags, node_id="node-b", prefix=UNSHARE)
    assert a_proc.proc is not None and b_proc.proc is not None
    a_pid, b_pid = a_proc.proc.pid, b_proc.proc.pid

    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "shared-rwo", cap, 64 * h.MiB)
    vid = vol.volume_id

    # node-a takes the volume, writes and syncs data.
    ctx_a = h.publish(ctrl, vid, "node-a", cap)
    a_staging, a_target = workdir / "a" / "globalmount", workdir / "a" / "pod" / "mount"
    a_staging.mkdir(parents=True)
    h.stage(a, vol, a_staging, cap, ctx_a)
    h.node_publish(a, vid, a_staging, a_target, cap)
    assert str(a_target) in mount_points(a_pid)
    assert str(a_target) not in mount_points(b_pid), "each node has its own mount namespace"
    in_namespace(a_pid, f"head -c 4194304 /dev/urandom > {a_target}/data && sync")
    digest = in_namespace(a_pid, f"sha256sum < {a_target}/data").split()[0]

    # node-b is refused while node-a holds it; the message names node-a.
    err = h.expect_code(C.FAILED_PRECONDITION, h.publish, ctrl, vid, "node-b", cap)
    assert "node-a" in (err.details() or "") and "since" in (err.details() or "")

    # node-a freezes. While its heartbeat is fresh, force-detach is refused.
    a_proc.kill(signal.SIGSTOP)
    refused = ledger_cli(
        workdir,
        "force-detach",
        vid,
        "--node",
        "node-a",
        "--reason",
        "node-a unreachable",
        "--node-grace",
        "3",
    )
    assert refused.returncode == 1, refused
    assert "grace period" in refused.stderr
    # After the grace period of silence, the operator's decision is accepted and recorded.
    time.sleep(3.2)
    forced = ledger_cli(
        workdir,
        "force-detach",
        vid,
        "--node",
        "node-a",
        "--reason",
        "node-a unreachable",
        "--node-grace",
        "3",
    )
    assert forced.returncode == 0, forced
    assert "RISK" in forced.stdout and "generation" in forced.stdout

    # node-b now takes the volume and reads node-a's synced data intact.
    ctx_b = h.publish(ctrl, vid, "node-b", cap)
    assert int(ctx_b["generation"]) > int(ctx_a["generation"])
    b_staging, b_target = workdir / "b" / "globalmount", workdir / "b" / "pod" / "mount"
    b_staging.mkdir(parents=True)
    h.stage(b, vol, b_staging, cap, ctx_b)
    h.node_publish(b, vid, b_staging, b_target, cap)
    assert in_namespace(b_pid, f"sha256sum < {b_target}/data").split()[0] == digest

    # node-a thaws and, within its fence interval, cuts itself off.
    thawed = time.monotonic()
    a_proc.kill(signal.SIGCONT)
    wait_for(
        lambda: not any(str(workdir / "a") in m for m in mount_points(a_pid)),
        10,
        "node-a to unmount its staging and target",
    )
    fenced_after = time.monotonic() - thawed
    print(f"node-a fenced itself {fenced_after:.2f}s after it thawed (--fence-interval 1)")
    # Its fence check was overdue when it thawed, so it runs at once; allow for a loaded machine.
    assert fenced_after < 3.0
    assert len(loops_backed_under(workdir)) == 1, "only node-b's loop device is left"
    assert "FENCING volume" in a_proc.log()
    # A kubelet retry on node-a with the revoked token is refused.
    err = h.expect_code(C.FAILED_PRECONDITION, h.stage, a, vol, a_staging, cap, ctx_a)
    assert "node-b" in (err.details() or "")

    # The ledger tells the story.
    listing = ledger_cli(workdir, "list")
    assert listing.returncode == 0
    rows = listing.stdout.splitlines()
    assert rows[0].split()[:3] == ["VOLUME", "NODE", "MODE"]
    assert len(rows) == 2 and "node-b" in rows[1] and "SINGLE_NODE_WRITER" in rows[1]

    def audit_has_fence() -> bool:
        return "fenced" in ledger_cli(workdir, "audit").stdout

    wait_for(audit_has_fence, 10, "the fence event in the audit trail")
    audit = ledger_cli(workdir, "audit", "--volume", vid).stdout
    actions = [line.split()[3] for line in audit.splitlines()[1:]]
    assert actions == ["publish", "force-detach", "publish", "fenced"], audit
    assert "node-a unreachable" in audit
    print(listing.stdout)
    print(audit)

    # Teardown on node-b, then the volume goes.
    h.node_unpublish(b, vid, b_target)
    h.unstage(b, vid, b_staging)
    h.unpublish(ctrl, vid, "node-b")
    h.delete(ctrl, vid)
    assert not loops_backed_under(workdir)


def test_no_two_live_stagers_after_an_unpublish_behind_a_nodes_back(
    spawn: Any, workdir: Path
) -> None:
    """Kubernetes unpublishes a node it can't reach after a timeout, even if that node's plugin
    is alive and has the volume mounted. The next node may publish at once, but it can't stage
    while the old node's fresh heartbeat still lists the volume: ABORTED (retry) until the old
    node has fenced itself."""
    pool = str(workdir / "pool")
    shared = ["--pool-scope", "shared", "--pool-dir", pool]
    _ctrl, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    flags = ["--mode", "node", *shared, "--heartbeat-interval", "0.3", "--fence-interval", "2"]
    a_proc, a = spawn("node-a", *flags, node_id="node-a", prefix=UNSHARE)
    _b_proc, b = spawn("node-b", *flags, node_id="node-b", prefix=UNSHARE)
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "moved", cap, 32 * h.MiB)
    ctx_a = h.publish(ctrl, vol.volume_id, "node-a", cap)
    a_staging, b_staging = workdir / "a" / "st", workdir / "b" / "st"
    a_staging.mkdir(parents=True)
    b_staging.mkdir(parents=True)
    h.stage(a, vol, a_staging, cap, ctx_a)

    h.unpublish(ctrl, vol.volume_id, "node-a")  # behind node-a's back: it still has it mounted
    ctx_b = h.publish(ctrl, vol.volume_id, "node-b", cap)
    err = h.expect_code(C.ABORTED, h.stage, b, vol, b_staging, cap, ctx_b)
    assert "node-a" in (err.details() or "")

    wait_for(lambda: "FENCING volume" in a_proc.log(), 10, "node-a to fence itself")
    wait_for(lambda: _stages(b, vol, b_staging, cap, ctx_b), 10, "node-b's stage to go through")
    assert a_proc.proc is not None
    assert not any(str(a_staging) == m for m in mount_points(a_proc.proc.pid))
    h.unstage(b, vol.volume_id, b_staging)


def _stages(client: Any, vol: Any, staging: Path, cap: Any, ctx: dict[str, str]) -> bool:
    try:
        h.stage(client, vol, staging, cap, ctx)
    except grpc.RpcError as e:
        assert e.code() == C.ABORTED, e
        return False
    return True
