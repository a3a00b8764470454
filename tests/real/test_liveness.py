"""Liveness is separate from the work, and Probe answers ready=false while the driver starts.

On a real server: unary calls whose request body never arrives hold no thread and are cancelled
once the body is 5 s late; with every work thread stuck on a sqlite writer lock held by another
process, and 64 stalled Probes on another connection, Probe and the gRPC health Check still
answer within the livenessprobe's second. Probe answers ready=false, never an error, while the
driver starts and when the state filesystem refuses a real write."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client import csi_requests as rq
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.support.stall import StalledCalls

QUICK = 3.0  # seconds: a liveness probe's budget
PROBE = "/csi.v1.Identity/Probe"


def probe(client: Client) -> bool:
    return bool(client.identity.Probe(pb.ProbeRequest(), timeout=QUICK).ready.value)


def health_status(client: Client) -> int:
    stub = health_pb2_grpc.HealthStub(client.channel)
    return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=QUICK).status)


def test_32_stalled_calls_hold_no_thread(spawn: Any) -> None:
    """32 calls whose bodies never arrive, on a 16-thread server: the same method still answers
    on another connection (each stalled call used to hold a worker until the body came)."""
    _, client = spawn("d", "--workers", "16")
    assert client is not None
    info = pb.NodeGetInfoRequest()
    with StalledCalls(client.socket, "/csi.v1.Node/NodeGetInfo", 32) as stalled:
        time.sleep(0.5)  # let the server take them in
        assert client.node.NodeGetInfo(info, timeout=QUICK).node_id == "node-a"
        assert probe(client) is True
        assert health_status(client) == health_pb2.HealthCheckResponse.SERVING
        assert client.identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=QUICK).name
        assert stalled.reset == set(), "a stalled call is cancelled by its deadline, not refused"


# The livenessprobe sidecar's --probe-timeout (default 1 s) is the deadline it gives Probe; a
# Probe that misses it is a failed liveness check, and failureThreshold of them in a row restart
# the driver. So this is the bound a Probe must meet for the driver to stay alive, not a speed
# goal: the test gives Probe that deadline and nothing tighter, on a connection made beforehand
# as the sidecar's is, and the calls around it are what would make it miss (stuck work, stalls).
LIVENESSPROBE_TIMEOUT = 1.0


def _holding_the_writer_lock(db: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_64_stalled_probes_and_stuck_work_leave_probe_answering_within_a_second(
    spawn: Any, workdir: Path
) -> None:
    """Every work thread waits for sqlite's writer lock (held by another process), and 64 Probe
    calls whose bodies never arrive sit on one connection: a Probe on another connection, as
    the livenessprobe sidecar sends it, answers ready within its 1 s deadline, and so do
    GetPluginInfo and health Check. None of the 64 is refused; each is cancelled once its body
    is 5 s late."""
    workers = 4
    _, client = spawn("d", "--workers", str(workers))
    assert client is not None
    prober = grpc.insecure_channel(
        f"unix://{client.socket}", options=[("grpc.use_local_subchannel_pool", 1)]
    )
    grpc.channel_ready_future(prober).result(timeout=QUICK)
    identity = pb_grpc.IdentityStub(prober)
    holder = _holding_the_writer_lock(workdir / "d-state" / "state.db")
    stuck = []
    try:
        stuck = [
            client.controller.CreateVolume.future(
                rq.create_volume(f"stuck-{i}", h.block_cap(), 1 << 20), timeout=60
            )
            for i in range(workers + 2)
        ]
        time.sleep(1.0)
        # The work executor is taken: a call behind the stuck ones waits in its queue.
        with pytest.raises(grpc.RpcError) as e:
            client.node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=1.0)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        with StalledCalls(client.socket, PROBE, 64) as stalled:
            time.sleep(0.5)  # let the server take them in
            ready = identity.Probe(pb.ProbeRequest(), timeout=LIVENESSPROBE_TIMEOUT).ready
            assert ready.value is True
            info = identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=LIVENESSPROBE_TIMEOUT)
            assert info.name
            health = health_pb2_grpc.HealthStub(prober)
            checked = health.Check(health_pb2.HealthCheckRequest(), timeout=LIVENESSPROBE_TIMEOUT)
            assert checked.status == health_pb2.HealthCheckResponse.SERVING
            assert stalled.reset == set(), f"{len(stalled.reset)} stalled Probes were refused"
            assert stalled.wait_reset(64, 60), f"{len(stalled.reset)} of 64 cancelled"
    finally:
        holder.kill()
        holder.wait(timeout=10)
        prober.close()
    for future in stuck:  # once the lock is free, the stuck calls finish
        assert future.result().volume.volume_id


def test_stalled_probe_calls_on_many_connections_are_cancelled(spawn: Any) -> None:
    """Stalled Probes on three connections, more than the liveness threads: none takes a thread,
    each is cancelled (reset) once its body is 5 s late, and Probe answers meanwhile."""
    _, client = spawn("d")
    assert client is not None
    from csi_hostpath.api.runtime.lanes import LIVENESS_WORKERS

    connections, calls = 3, 16
    assert connections * calls > LIVENESS_WORKERS
    with contextlib.ExitStack() as stack:
        stalls = [
            stack.enter_context(StalledCalls(client.socket, PROBE, calls))
            for _ in range(connections)
        ]
        assert probe(client) is True
        for stalled in stalls:
            assert stalled.wait_reset(calls, 60), stalled.reset
        assert probe(client) is True


def test_requests_that_do_not_parse_leave_their_connection_serving(spawn: Any) -> None:
    """40 bodies that are not the method's message, each answered INVALID_ARGUMENT with the
    reason, and the connection serves on."""
    _, client = spawn("d")
    assert client is not None
    call = client.channel.unary_unary(
        "/csi.v1.Controller/ControllerUnpublishVolume",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    for _ in range(40):
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff\xff\xff", timeout=QUICK)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert probe(client) is True


def test_probe_does_not_wait_on_a_writer_lock_held_by_another_process(
    spawn: Any, workdir: Path
) -> None:
    _, client = spawn("d")
    assert client is not None
    holder = _holding_the_writer_lock(workdir / "d-state" / "state.db")
    writer_done = threading.Event()
    try:

        def write() -> None:
            # An RPC that needs the writer lock: it waits in sqlite's busy handler.
            with contextlib.suppress(grpc.RpcError):
                h.create(client, "blocked", h.block_cap(), 4 << 20)
            writer_done.set()

        threading.Thread(target=write, daemon=True).start()
        time.sleep(1.0)
        assert not writer_done.is_set(), "the writer should be waiting for the lock"
        started = time.monotonic()
        assert probe(client) is True
        assert time.monotonic() - started < QUICK
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert writer_done.wait(40)


def test_probe_is_ready_false_not_an_error_until_started(workdir: Path) -> None:
    from csi_hostpath.cli import build_parser, config_from_args
    from csi_hostpath.daemon.server import build_driver
    from csi_hostpath.system.fake import fake_system
    from tests.conftest import driver_args

    config = config_from_args(build_parser().parse_args(["serve", *driver_args(workdir, "s")]))
    drv = build_driver(config, system=fake_system(config.pool_dir))
    drv.server.start()  # serving, but start() (background loops, readiness) has not run
    client = Client(config.socket_path)
    try:
        assert probe(client) is False
        assert health_status(client) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        client.close()
        drv.stop(grace=1)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 512):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\xff" * chunk)
    return filler


def test_probe_is_ready_false_when_the_state_filesystem_refuses_a_write(workdir: Path) -> None:
    from csi_hostpath.system.fake import fake_system

    state = workdir / "w-state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "csihp-state", str(state)], check=True)
    with in_process(workdir, "w", system=fake_system) as client:
        assert probe(client) is True
        filler = _fill(state)
        assert probe(client) is False
        filler.unlink()
        assert probe(client) is True
