"""`csi-hostpath registrar` registers a real driver with a fake kubelet's plugin watcher.

`csi-hostpath registrar` against a real `csi-hostpath serve`, with a fake kubelet: a gRPC
client that does what the kubelet's plugin watcher does (k8s.io/kubernetes v1.35.4,
pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go): it sees the socket appear
in plugins_registry, calls GetInfo, dials the endpoint it was given for NodeGetInfo, and reports
through NotifyRegistrationStatus."""

from __future__ import annotations

import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath._pb import pluginregistration_pb2 as reg_pb
from csi_hostpath._pb import pluginregistration_pb2_grpc as reg_grpc
from tests.sidecars.procs import Sidecar, wait_until

pytestmark = pytest.mark.real  # a real driver process on the real system layer

DRIVER = "reg.test.csi.dev"
KUBELET_TIMEOUT = 10.0  # the kubelet allows 1 s; a loaded test machine gets more


class FakeKubelet:
    def __init__(self, registry: Path) -> None:
        self.socket = registry / f"{DRIVER}-reg.sock"
        wait_until(f"{self.socket} to appear", self.socket.is_socket)
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        self.stub = reg_grpc.RegistrationStub(self.channel)

    def get_info(self) -> reg_pb.PluginInfo:
        info: reg_pb.PluginInfo = self.stub.GetInfo(reg_pb.InfoRequest(), timeout=KUBELET_TIMEOUT)
        return info

    def notify(self, registered: bool, error: str = "") -> None:
        self.stub.NotifyRegistrationStatus(
            reg_pb.RegistrationStatus(plugin_registered=registered, error=error),
            timeout=KUBELET_TIMEOUT,
        )

    def close(self) -> None:
        self.channel.close()


def start_registrar(sidecar: Callable[..., Sidecar], driver_sock: Path, registry: Path) -> Sidecar:
    registry.mkdir(exist_ok=True)
    return sidecar(
        "registrar",
        f"--csi-address={driver_sock}",
        # On this machine the host's path and the registrar's are the same.
        f"--kubelet-registration-path={driver_sock}",
        f"--plugin-registration-path={registry}",
        "--http-endpoint=127.0.0.1:0",
        "--timeout=10s",
        "--v=5",
    )


def driver_and_registrar(spawn: Any, sidecar: Any, workdir: Path) -> tuple[Any, Sidecar, Path]:
    """A driver named DRIVER, its registrar, and the plugins_registry it registers into."""
    handle, _ = spawn("drv", "--driver-name", DRIVER)
    registry = workdir / "plugins_registry"
    return handle, start_registrar(sidecar, handle.socket, registry), registry


def test_the_kubelet_registers_the_driver(spawn: Any, sidecar: Any, workdir: Path) -> None:
    handle, registrar, registry = driver_and_registrar(spawn, sidecar, workdir)
    kubelet = FakeKubelet(registry)
    try:
        info = kubelet.get_info()
        assert info.type == "CSIPlugin"
        assert info.name == DRIVER
        assert info.endpoint == str(handle.socket)
        assert list(info.supported_versions) == ["1.0.0"]
        # Only the kubelet (root) may connect, as upstream's umask 0077 makes it.
        assert stat.S_IMODE(kubelet.socket.stat().st_mode) & 0o077 == 0
        # The kubelet's next step: NodeGetInfo on the endpoint it was told.
        with grpc.insecure_channel(f"unix://{info.endpoint}") as ch:
            node = pb_grpc.NodeStub(ch).NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10)
        assert node.node_id == "node-a"
        kubelet.notify(True)
        assert registrar.healthz() == (200, "ok")
        assert "the kubelet registered CSI driver reg.test.csi.dev" in registrar.log()
    finally:
        kubelet.close()
    assert registrar.running()


def test_a_failed_registration_exits_1_and_takes_the_socket_away(
    spawn: Any, sidecar: Any, workdir: Path
) -> None:
    _handle, registrar, registry = driver_and_registrar(spawn, sidecar, workdir)
    kubelet = FakeKubelet(registry)
    try:
        kubelet.get_info()
        # The kubelet gets its answer before the registrar goes.
        kubelet.notify(False, "RegisterPlugin error -- NodeGetInfo failed: boom")
    finally:
        kubelet.close()
    assert registrar.wait() == 1
    assert not kubelet.socket.exists()
    assert "NodeGetInfo failed: boom" in registrar.log()


def test_sigterm_removes_the_registration_socket(spawn: Any, sidecar: Any, workdir: Path) -> None:
    _handle, registrar, registry = driver_and_registrar(spawn, sidecar, workdir)
    kubelet = FakeKubelet(registry)
    kubelet.close()
    registrar.signal(signal.SIGTERM)
    assert registrar.wait() == 0
    assert not kubelet.socket.exists()


def test_healthz_fails_once_the_registration_socket_is_gone(
    spawn: Any, sidecar: Any, workdir: Path
) -> None:
    _handle, registrar, registry = driver_and_registrar(spawn, sidecar, workdir)
    kubelet = FakeKubelet(registry)
    kubelet.close()
    # The socket is bound a moment before the registrar records it as its own: until then its
    # health says it is still starting (503), which is not what this test is about.
    wait_until("the registrar to be healthy", lambda: registrar.healthz()[0] != 503)
    assert registrar.healthz() == (200, "ok")
    kubelet.socket.unlink()  # a kubelet that wiped its plugins_registry
    status, body = registrar.healthz()
    assert status == 404
    assert "does not exist" in body
    # A regular file in its place is no registration socket either.
    kubelet.socket.write_text("")
    status, body = registrar.healthz()
    assert status == 500
    assert "not a socket" in body


def test_it_waits_for_the_driver_then_registers(spawn: Any, sidecar: Any, workdir: Path) -> None:
    handle, _ = spawn("drv", "--driver-name", DRIVER, start=False)
    registry = workdir / "plugins_registry"
    registrar = start_registrar(sidecar, handle.socket, registry)
    status, body = registrar.healthz()
    assert status == 503
    assert "waiting for the CSI driver" in body
    assert not (registry / f"{DRIVER}-reg.sock").exists()
    handle.start()
    kubelet = FakeKubelet(registry)
    try:
        assert kubelet.get_info().name == DRIVER
    finally:
        kubelet.close()
    assert "waiting for the CSI driver at" in registrar.log()


def test_a_stale_socket_is_replaced_and_a_live_one_refused(
    spawn: Any, sidecar: Any, workdir: Path
) -> None:
    handle, first, registry = driver_and_registrar(spawn, sidecar, workdir)
    FakeKubelet(registry).close()
    # A second registrar for the same driver on the same node must not steal the socket.
    second = start_registrar(sidecar, handle.socket, registry)
    assert second.wait() == 1
    assert "another process is serving" in second.log()
    assert first.healthz() == (200, "ok")
    # kill -9 leaves the socket behind; the restarted container takes the stale one over.
    first.signal(signal.SIGKILL)
    first.wait()
    assert (registry / f"{DRIVER}-reg.sock").is_socket()
    third = start_registrar(sidecar, handle.socket, registry)
    kubelet = FakeKubelet(registry)
    try:
        wait_until("the new registrar to answer", lambda: third.healthz()[0] == 200)
        assert kubelet.get_info().name == DRIVER
    finally:
        kubelet.close()


def test_a_missing_registration_directory_is_named(sidecar: Any, workdir: Path) -> None:
    registrar = sidecar(
        "registrar",
        f"--csi-address={workdir}/csi.sock",
        "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock",
        f"--plugin-registration-path={workdir}/nowhere",
    )
    assert registrar.wait() == 1
    assert "mount the kubelet's plugins_registry directory there" in registrar.log()
