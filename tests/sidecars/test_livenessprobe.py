"""`csi-hostpath livenessprobe`: /healthz follows the CSI Probe of a real driver.

`csi-hostpath livenessprobe`: /healthz is the CSI Probe of a real `csi-hostpath serve` (200
while it answers, 500 with the reason once it is stopped, 200 again after its restart), and of
small Identity servers on real gRPC sockets that answer not ready, or too late."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import wrappers_pb2

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from tests.sidecars.procs import Sidecar, get, wait_until


def start_probe(sidecar: Any, sock: Path, timeout: str = "5s") -> Sidecar:
    probe: Sidecar = sidecar(
        "livenessprobe",
        f"--csi-address=unix://{sock}",
        "--http-endpoint=127.0.0.1:0",
        f"--probe-timeout={timeout}",
    )
    return probe


@pytest.mark.real  # a real driver process on the real system layer
def test_healthz_follows_the_driver(spawn: Any, sidecar: Any) -> None:
    handle, _ = spawn("drv")
    probe = start_probe(sidecar, handle.socket)
    assert probe.healthz() == (200, "ok")
    wait_until("the driver's name in the log", lambda: "loop.hostpath.csi.dev" in probe.log())
    handle.stop()
    status, body = probe.healthz()
    assert status == 500
    assert str(handle.socket) in body
    handle.start()
    wait_until("a ready probe after the restart", lambda: probe.healthz() == (200, "ok"))
    assert probe.running()


class Identity(pb_grpc.IdentityServicer):
    def __init__(self, ready: bool | None, hold: threading.Event | None = None) -> None:
        self.ready = ready
        self.hold = hold

    def GetPluginInfo(self, request: Any, context: Any) -> pb.GetPluginInfoResponse:
        return pb.GetPluginInfoResponse(name="fake.csi.dev", vendor_version="1")

    def GetPluginCapabilities(self, request: Any, context: Any) -> pb.GetPluginCapabilitiesResponse:
        # livenessprobe never asks: the generated servicer's answer, written out.
        context.set_code(grpc.StatusCode.UNIMPLEMENTED)
        context.set_details("Method not implemented!")
        raise NotImplementedError("Method not implemented!")

    def Probe(self, request: Any, context: Any) -> pb.ProbeResponse:
        if self.hold is not None:
            self.hold.wait(60)
        if self.ready is None:
            return pb.ProbeResponse()
        return pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=self.ready))


@contextmanager
def identity_server(sock: Path, servicer: Identity) -> Iterator[None]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_IdentityServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield
    finally:
        if servicer.hold is not None:
            servicer.hold.set()
        server.stop(grace=None)


def test_a_driver_that_is_not_ready_fails(sidecar: Any, workdir: Path) -> None:
    sock = workdir / "csi.sock"
    with identity_server(sock, Identity(ready=False)):
        assert start_probe(sidecar, sock).healthz() == (500, "driver responded but is not ready")


def test_ready_left_out_means_ready(sidecar: Any, workdir: Path) -> None:
    """CSI: "If not present, the caller SHALL assume that the plugin is in a ready state"."""
    sock = workdir / "csi.sock"
    with identity_server(sock, Identity(ready=None)):
        assert start_probe(sidecar, sock).healthz() == (200, "ok")


def test_a_probe_that_takes_too_long_fails(sidecar: Any, workdir: Path) -> None:
    sock = workdir / "csi.sock"
    with identity_server(sock, Identity(ready=True, hold=threading.Event())):
        status, body = start_probe(sidecar, sock, timeout="300ms").healthz()
    assert status == 500
    assert "DEADLINE_EXCEEDED" in body


def test_no_driver_at_all_is_named(sidecar: Any, workdir: Path) -> None:
    probe = start_probe(sidecar, workdir / "absent.sock")
    status, body = probe.healthz()
    assert status == 500
    assert "absent.sock does not exist" in body
    # Only /healthz is served.
    assert get(f"http://127.0.0.1:{probe.port}/metrics")[0] == 404


def test_health_port_and_http_endpoint_exclude_each_other(sidecar: Any, workdir: Path) -> None:
    probe = sidecar(
        "livenessprobe",
        f"--csi-address={workdir}/csi.sock",
        "--health-port=9999",
        "--http-endpoint=:9998",
    )
    assert probe.wait() == 2
    assert "only one of --health-port and --http-endpoint" in probe.log()
