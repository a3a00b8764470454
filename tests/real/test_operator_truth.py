"""Operator truth on real devices: inspect, the stale-holder gauge, gRPC health, demo.

Operator truth on real loop devices: `inspect` at every phase (including a holder that went
silent), the Prometheus stale-holder gauge, the gRPC health service, and `demo`."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import helpers as h
from tests.support.processes import UNSHARE, free_port, inspect, ledger_cli, metric, wait_for


def test_inspect_every_phase_and_the_stale_holder_alert(spawn: Any, workdir: Path) -> None:
    port = free_port()
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    _, ctrl = spawn(
        "ctrl",
        "--mode",
        "controller",
        *shared,
        "--node-grace",
        "2",
        "--heartbeat-interval",
        "0.3",
        "--metrics-address",
        f"127.0.0.1:{port}",
        node_id="controller",
    )
    a_proc, a = spawn(
        "node-a",
        "--mode",
        "node",
        *shared,
        "--heartbeat-interval",
        "0.3",
        "--fence-interval",
        "1",
        node_id="node-a",
        prefix=UNSHARE,
    )
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "inspected", cap, 32 * h.MiB)
    vid = vol.volume_id

    phases = inspect(workdir, vid)
    assert phases["provisioned"]["state"] == "ok"
    assert phases["attached"]["state"] == "pending"
    assert "VolumeAttachment" in phases["attached"]["next_action"]

    ctx = h.publish(ctrl, vid, "node-a", cap)
    phases = inspect(workdir, vid)
    assert phases["attached"]["state"] == "ok" and "node-a" in phases["attached"]["detail"]
    assert phases["staged"]["state"] == "pending"
    assert "NodeStageVolume on node-a" in phases["staged"]["reason"]

    staging, target = workdir / "a" / "globalmount", workdir / "a" / "mount"
    staging.mkdir(parents=True)
    h.stage(a, vol, staging, cap, ctx)
    phases = inspect(workdir, vid)
    assert phases["staged"]["state"] == "ok" and "/dev/loop" in phases["staged"]["detail"]
    assert phases["published"]["state"] == "pending"
    assert "NodePublishVolume" in phases["published"]["reason"]

    h.node_publish(a, vid, staging, target, cap)
    phases = inspect(workdir, vid)
    assert phases["published"]["state"] == "ok" and str(target) in phases["published"]["detail"]
    assert phases["health"]["state"] == "ok"
    assert metric(port, "csi_hostpath_stale_publications") == 0
    assert metric(port, 'csi_hostpath_publications{access_mode="SINGLE_NODE_WRITER"}') == 1

    # node-a freezes: after the grace period the holder is reported silent, and the alert fires.
    a_proc.kill(signal.SIGSTOP)
    wait_for(
        lambda: metric(port, "csi_hostpath_stale_publications") == 1,
        15,
        "the stale-holder gauge to reach 1",
    )
    phases = inspect(workdir, vid)
    attached = phases["attached"]
    assert attached["state"] == "stuck"
    assert (
        "held by node-a since" in attached["reason"] and "node-a silent for" in attached["reason"]
    )
    assert "waiting is safe" in attached["next_action"]
    assert "force-detach possible with --reason" in attached["next_action"]

    forced = ledger_cli(
        workdir, "force-detach", vid, "--node", "node-a", "--reason", "test", "--node-grace", "2"
    )
    assert forced.returncode == 0, forced.stderr
    assert metric(port, "csi_hostpath_stale_publications") == 0
    assert metric(port, "csi_hostpath_force_detaches_total") == 1
    phases = inspect(workdir, vid)
    assert phases["attached"]["state"] == "pending"
    assert phases["staged"]["state"] == "stuck", "node-a still reports it staged"
    assert "fences itself" in phases["staged"]["next_action"]

    a_proc.kill(signal.SIGCONT)
    wait_for(
        lambda: inspect(workdir, vid)["staged"]["state"] == "pending",
        15,
        "node-a to fence itself and report it",
    )
    wait_for(
        lambda: metric(port, "csi_hostpath_fenced_volumes_total") == 1,
        15,
        "the fence to reach the controller's audit trail",
    )
    h.delete(ctrl, vid)


def test_health_service_and_demo(spawn: Any, workdir: Path) -> None:
    handle, client = spawn("drv")
    stub = health_pb2_grpc.HealthStub(client.channel)
    # The socket answers before start() has run its first readiness check, and health says
    # NOT_SERVING until then (by design: the sidecars wait): wait for it, don't race it.
    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        wait_for(
            lambda: stub.Check(health_pb2.HealthCheckRequest(service="")).status == serving,
            10,
            "health to say SERVING once started",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}; the driver's log:\n{handle.log()}") from None
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "csi_hostpath",
            "demo",
            "--endpoint",
            f"unix://{handle.socket}",
            "--state-dir",
            str(workdir / "drv-state"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for step in (
        "CreateVolume",
        "ControllerPublishVolume",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeGetVolumeStats",
        "after DeleteVolume",
    ):
        assert step in text, step
    assert "published    ok" in text
    assert not h.mounted(workdir), "demo cleans up its mounts"
    assert "rpc method=NodeStageVolume" in handle.log()
