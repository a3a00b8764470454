"""The ledger and Kubernetes tell one story, on a real controller and two node plugins.

The ledger and Kubernetes tell one story, on real processes: one controller and two node
plugins, each node in its own mount namespace, sharing one pool.

- external-attacher's ReconcileVA (pkg/controller/csi_handler.go) re-requests a VolumeAttachment
  whose node ListVolumes no longer shows. After a force-detach of a frozen node that request
  must not hand the volume back: a silent node gets no new hold (FAILED_PRECONDITION naming the
  silence).
- The attach-detach controller's force-detach (out-of-service taint, or 6 minutes on an unhealthy
  node) is a ControllerUnpublishVolume with no NodeUnstage before it: the audit calls it a
  revocation, and the node fences itself."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.support import helpers as h
from tests.support.processes import UNSHARE, free_port, ledger_cli, metric, mount_points, wait_for

C = grpc.StatusCode
GRACE = "2"


def _cluster(spawn: Any, workdir: Path, *ctrl_flags: str) -> tuple[Any, Any, Any, Any, Any]:
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    beat = ["--heartbeat-interval", "0.3", "--node-grace", GRACE]
    _ctrl, ctrl = spawn(
        "ctrl", "--mode", "controller", *shared, *beat, *ctrl_flags, node_id="controller"
    )
    flags = ["--mode", "node", *shared, *beat, "--fence-interval", "1"]
    a_proc, a = spawn("node-a", *flags, node_id="node-a", prefix=UNSHARE)
    b_proc, b = spawn("node-b", *flags, node_id="node-b", prefix=UNSHARE)
    return ctrl, a_proc, a, b_proc, b


def _audit_actions(workdir: Path, volume_id: str) -> list[str]:
    out = ledger_cli(workdir, "audit", "--volume", volume_id).stdout
    return [line.split()[3] for line in out.splitlines()[1:]]


def _published_on(ctrl: Any, volume_id: str) -> list[str]:
    """What external-attacher's ReconcileVA sees: ListVolumes' published_node_ids."""
    listed = ctrl.controller.ListVolumes(pb.ListVolumesRequest())
    return next(
        list(e.status.published_node_ids) for e in listed.entries if e.volume.volume_id == volume_id
    )


def test_the_attachers_reconcile_cannot_undo_a_force_detach(spawn: Any, workdir: Path) -> None:
    """Failed on the old code: the re-request for frozen node-a after its force-detach was
    granted a fresh hold (generation 3), and node-b's attach was then refused."""
    ctrl, a_proc, a, _b_proc, b = _cluster(spawn, workdir)
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "reconciled", cap, 32 * h.MiB)
    vid = vol.volume_id
    ctx_a = h.publish(ctrl, vid, "node-a", cap)
    a_staging, b_staging = workdir / "a" / "globalmount", workdir / "b" / "globalmount"
    a_staging.mkdir(parents=True)
    b_staging.mkdir(parents=True)
    h.stage(a, vol, a_staging, cap, ctx_a)

    a_proc.kill(signal.SIGSTOP)
    time.sleep(float(GRACE) + 0.3)
    # Silent, node-a still holds the volume: a repeat of its publish stays idempotent.
    assert h.publish(ctrl, vid, "node-a", cap) == ctx_a
    operator = ["--node", "node-a", "--reason", "frozen", "--node-grace", GRACE]
    forced = ledger_cli(workdir, "force-detach", vid, *operator)
    assert forced.returncode == 0, forced
    assert _published_on(ctrl, vid) == []

    # ReconcileVA's forceSync: the VolumeAttachment for node-a is still there and attached, the
    # driver no longer lists node-a, so the attacher publishes to node-a again.
    err = h.expect_code(C.FAILED_PRECONDITION, h.publish, ctrl, vid, "node-a", cap)
    details = err.details() or ""
    assert "node-a" in details and "no heartbeat" in details and "grace" in details, details
    assert _published_on(ctrl, vid) == []

    # The pod's new node takes the volume.
    ctx_b = h.publish(ctrl, vid, "node-b", cap)
    assert int(ctx_b["generation"]) > int(ctx_a["generation"])
    h.stage(b, vol, b_staging, cap, ctx_b)
    # Another reconcile round for node-a changes nothing.
    h.expect_code(C.FAILED_PRECONDITION, h.publish, ctrl, vid, "node-a", cap)

    # node-a thaws and fences itself; beating again, it is refused because node-b holds it.
    a_proc.kill(signal.SIGCONT)
    assert a_proc.proc is not None
    wait_for(lambda: str(a_staging) not in mount_points(a_proc.proc.pid), 10, "node-a's fence")
    assert "FENCING volume" in a_proc.log()
    err = h.expect_code(C.FAILED_PRECONDITION, h.publish, ctrl, vid, "node-a", cap)
    assert "node-b" in (err.details() or "")
    assert _published_on(ctrl, vid) == ["node-b"]
    assert _audit_actions(workdir, vid)[:3] == ["publish", "force-detach", "publish"]

    h.unstage(b, vid, b_staging)
    h.unpublish(ctrl, vid, "node-b")
    h.delete(ctrl, vid)


def test_an_unpublish_without_unstage_is_audited_as_a_revocation(spawn: Any, workdir: Path) -> None:
    """Failed on the old code: the audit said 'unpublish' for the detach that skipped NodeUnstage,
    as for the one that followed it."""
    port = free_port()
    ctrl, a_proc, a, _b_proc, _b = _cluster(
        spawn, workdir, "--metrics-address", f"127.0.0.1:{port}"
    )
    cap = h.mount_cap("ext4")
    forced, orderly = (h.create(ctrl, name, cap, 32 * h.MiB) for name in ("tainted", "orderly"))
    stagings = {}
    for vol in (forced, orderly):
        ctx = h.publish(ctrl, vol.volume_id, "node-a", cap)
        stagings[vol.volume_id] = workdir / "a" / vol.volume_id
        stagings[vol.volume_id].mkdir(parents=True)
        h.stage(a, vol, stagings[vol.volume_id], cap, ctx)

    # The kubelet's teardown, then the detach: an ordinary unpublish.
    h.unstage(a, orderly.volume_id, stagings[orderly.volume_id])
    h.unpublish(ctrl, orderly.volume_id, "node-a")
    assert _audit_actions(workdir, orderly.volume_id) == ["publish", "unpublish"]

    # The out-of-service taint: the attach-detach controller detaches at once, node-a alive and
    # still staged.
    h.unpublish(ctrl, forced.volume_id, "node-a")
    assert _audit_actions(workdir, forced.volume_id)[:2] == ["publish", "revoke"]
    audit = ledger_cli(workdir, "audit", "--volume", forced.volume_id).stdout
    assert "without NodeUnstage" in audit and "staged" in audit, audit
    assert metric(port, "csi_hostpath_revocations_total") == 1
    assert metric(port, "csi_hostpath_force_detaches_total") == 0
    assert a_proc.proc is not None
    pid = a_proc.proc.pid
    wait_for(lambda: str(stagings[forced.volume_id]) not in mount_points(pid), 10, "node-a's fence")
    assert "FENCING volume " + forced.volume_id in a_proc.log()
    wait_for(
        lambda: _audit_actions(workdir, forced.volume_id) == ["publish", "revoke", "fenced"],
        10,
        "the fence in the audit trail",
    )
    h.delete(ctrl, forced.volume_id)
    h.delete(ctrl, orderly.volume_id)
