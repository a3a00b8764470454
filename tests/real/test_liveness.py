"""Liveness is separate from the work, and Probe answers ready=false while the driver starts.

On a real server: 32 unary calls whose request body never arrives (each holds an RPC worker in
grpcio) and a sqlite writer lock held by another process on state.db must leave Probe and the
gRPC health Check answering within a second or two. Probe answers ready=false, never an error,
while the driver starts and when the state filesystem refuses a real write."""

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
from tests import helpers as h
from tests.conftest import Client, in_process
from tests.stall import StalledCalls

QUICK = 3.0  # seconds: a liveness probe's budget
PROBE = "/csi.v1.Identity/Probe"


def probe(client: Client) -> bool:
    return bool(client.identity.Probe(pb.ProbeRequest(), timeout=QUICK).ready.value)


def health_status(client: Client) -> int:
    stub = health_pb2_grpc.HealthStub(client.channel)
    return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=QUICK).status)


def test_32_stalled_calls_leave_probe_answering(spawn: Any) -> None:
    _, client = spawn("d", "--workers", "16")
    assert client is not None
    caps = pb.ControllerGetCapabilitiesRequest()
    with StalledCalls(client.socket, "/csi.v1.Controller/ControllerGetCapabilities", 32):
        time.sleep(0.5)  # let the server dispatch them
        # The reproduction holds: the RPC workers are all waiting for bodies.
        with pytest.raises(grpc.RpcError) as e:
            client.controller.ControllerGetCapabilities(caps, timeout=1.0)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        started = time.monotonic()
        assert probe(client) is True
        assert health_status(client) == health_pb2.HealthCheckResponse.SERVING
        info = client.identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=QUICK)
        assert info.name
        assert time.monotonic() - started < QUICK
    # The stalled connection is gone: its workers are free again.
    client.controller.ControllerGetCapabilities(caps, timeout=10)


def test_32_stalled_probe_calls_leave_probe_answering(spawn: Any) -> None:
    """Stalled calls of Probe itself: one connection may hold fewer streams than the liveness
    pool has workers, so the kubelet's Probe on its own connection still finds one free."""
    _, client = spawn("d", "--workers", "16")
    assert client is not None
    with StalledCalls(client.socket, PROBE, 32) as stalled:
        assert stalled.wait_reset(1, 30), "the streams past the cap are refused"
        assert probe(client) is True
        assert health_status(client) == health_pb2.HealthCheckResponse.SERVING


def test_stalled_probe_calls_on_many_connections_are_cancelled(spawn: Any) -> None:
    """Connections enough to take every liveness worker: each call whose body never arrives is
    cancelled (reset) after a while, and Probe answers again."""
    _, client = spawn("d")
    assert client is not None
    from csi_hostpath.api.liveness import LIVENESS_WORKERS

    connections, calls = 3, 16
    assert connections * calls > LIVENESS_WORKERS
    with contextlib.ExitStack() as stack:
        stalls = [
            stack.enter_context(StalledCalls(client.socket, PROBE, calls))
            for _ in range(connections)
        ]
        for stalled in stalls:
            assert stalled.wait_reset(calls, 60), stalled.reset
        assert probe(client) is True


def test_requests_that_do_not_parse_leave_their_connection_serving(spawn: Any) -> None:
    """More than the streams one connection may hold, each refused INVALID_ARGUMENT; a call
    whose parse failed in grpc itself held its stream until a garbage collection."""
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
    db = workdir / "d-state" / "state.db"
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
    writer_done = threading.Event()
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"

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
    from csi_hostpath.server import build_driver
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
