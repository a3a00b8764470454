"""`csi-hostpath registrar`: registers the node plugin with the kubelet, as node-driver-registrar
v2.17.0 does (cmd/csi-node-driver-registrar), behaviour for behaviour:

- It waits for the CSI driver at --csi-address and asks GetPluginInfo for the driver name.
- It serves the kubelet's plugin registration API (proto/pluginregistration.proto) on
  <--plugin-registration-path>/<driver>-reg.sock, made with umask 0077. The kubelet's plugin
  watcher sees the socket appear, calls GetInfo and learns: type "CSIPlugin", the driver name,
  the endpoint to dial (--kubelet-registration-path, the driver's socket on the host) and the
  supported version "1.0.0" (the kubelet takes the highest 1.x). Then it calls NodeGetInfo on
  the driver and reports through NotifyRegistrationStatus.
- A failed registration ends the process with status 1 so that the container restarts and
  registers again: the kubelet retries no registration by itself once it has called the
  driver. Before the exit the kubelet gets its answer and the socket is removed.
- SIGTERM (and SIGINT) removes the registration socket, so the kubelet deregisters the driver,
  and exits 0.
- GET /healthz on --http-endpoint: 200 while the registration socket exists and answers GetInfo
  with our driver name; 404 once the socket is gone (a kubelet that wiped plugins_registry),
  500 when it does not answer or the kubelet reported a failure. The liveness probe then
  restarts the container, which makes the socket again.

Where it differs: a live socket at the registration path is refused (another registrar serves
this driver on this node) instead of being removed; only a stale one is (daemon/endpoint.py).
"""

from __future__ import annotations

import argparse
import os
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from csi_hostpath._pb import pluginregistration_pb2 as reg_pb
from csi_hostpath._pb import pluginregistration_pb2_grpc as reg_grpc
from csi_hostpath.daemon.endpoint import EndpointRefused, claim_endpoint
from csi_hostpath.daemon.stop_signals import stop_on_signals
from csi_hostpath.sidecars import csi_conn
from csi_hostpath.sidecars._log import log
from csi_hostpath.sidecars.flags import http_endpoint
from csi_hostpath.sidecars.healthz import HealthServer

CSI_PLUGIN = "CSIPlugin"  # k8s.io/kubelet pluginregistration/v1 constants.go
SUPPORTED_VERSIONS = ("1.0.0",)


def registration_socket(registration_dir: str, driver_name: str) -> Path:
    return Path(registration_dir) / f"{driver_name}-reg.sock"


@dataclass
class Registration:
    """What the kubelet has said so far, read by /healthz and the main loop."""

    driver_name: str = ""
    socket: Path | None = None
    failure: str = ""
    registered: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    exit_code: int = 0


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, state: Registration, endpoint: str) -> None:
        self._state = state
        self._endpoint = endpoint

    def GetInfo(
        self, request: reg_pb.InfoRequest, context: grpc.ServicerContext
    ) -> reg_pb.PluginInfo:
        log.debug("GetInfo: driver %s at %s", self._state.driver_name, self._endpoint)
        return reg_pb.PluginInfo(
            type=CSI_PLUGIN,
            name=self._state.driver_name,
            endpoint=self._endpoint,
            supported_versions=SUPPORTED_VERSIONS,
        )

    def NotifyRegistrationStatus(
        self, request: reg_pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg_pb.RegistrationStatusResponse:
        state = self._state
        if request.plugin_registered:
            state.registered = True
            log.info(
                "the kubelet registered CSI driver %s (it dials %s)",
                state.driver_name,
                self._endpoint,
            )
        else:
            state.failure = request.error or "no reason given"
            log.error(
                "the kubelet refused to register CSI driver %s: %s; exiting so that the "
                "container restarts and registers again",
                state.driver_name,
                state.failure,
            )
            state.exit_code = 1
            state.done.set()  # the main thread stops the server gracefully: this reply gets out
        return reg_pb.RegistrationStatusResponse()


def health(state: Registration, timeout: float) -> tuple[int, str]:
    if state.failure:
        return 500, f"the kubelet reported a failed registration: {state.failure}"
    sock = state.socket
    if sock is None:
        return 503, "waiting for the CSI driver to answer GetPluginInfo"
    try:
        is_socket = sock.is_socket()
        exists = is_socket or sock.exists()
    except OSError as e:
        return 500, f"cannot stat the registration socket {sock}: {e}"
    if not exists:
        return 404, f"registration socket {sock} does not exist"
    if not is_socket:
        return 500, f"{sock} exists but is not a socket"
    try:
        with csi_conn.channel(str(sock)) as ch:
            info = reg_grpc.RegistrationStub(ch).GetInfo(reg_pb.InfoRequest(), timeout=timeout)
    except grpc.RpcError as e:
        return 500, f"GetInfo on the registration socket {sock} failed: {csi_conn.describe(e)}"
    if info.name != state.driver_name:
        return 500, f"the registration socket {sock} names driver {info.name!r}, not ours"
    return 200, "ok"


def _serve(state: Registration, sock: Path, endpoint: str) -> grpc.Server:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="registration"),
        options=[("grpc.so_reuseport", 0)],
    )
    reg_grpc.add_RegistrationServicer_to_server(RegistrationServicer(state, endpoint), server)
    claim_endpoint(sock)
    # Only root (the kubelet) may connect, as upstream's umask 0077 gives; umask is per process,
    # and nothing else here creates files while the socket is bound.
    old = os.umask(0o077)
    try:
        server.add_insecure_port(f"unix://{sock}")
    finally:
        os.umask(old)
    server.start()
    return server


def _remove_if_ours(sock: Path, inode: int) -> None:
    try:
        if sock.lstat().st_ino == inode:
            sock.unlink()
            log.info("removed the registration socket %s", sock)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.error("could not remove the registration socket %s: %s", sock, e)


def run(args: argparse.Namespace) -> int:
    try:
        listen = http_endpoint(args, default_port=0)
    except ValueError as e:
        log.error("%s", e)
        return 2
    if not os.path.isabs(args.kubelet_registration_path):
        log.error(
            "--kubelet-registration-path must be the driver socket's absolute path on the "
            "host, got %r",
            args.kubelet_registration_path,
        )
        return 2
    reg_dir = args.plugin_registration_path
    if not os.path.isdir(reg_dir):
        log.error(
            "the plugin registration directory %s does not exist: mount the kubelet's "
            "plugins_registry directory there (--plugin-registration-path)",
            reg_dir,
        )
        return 1

    state = Registration()
    stop_on_signals(state.done, log, "deregistering and stopping")
    healthz = HealthServer(listen, lambda: health(state, args.timeout)) if listen else None
    if healthz is not None:
        healthz.start()
    try:
        return _register(state, args)
    finally:
        if healthz is not None:
            healthz.stop()


def _register(state: Registration, args: argparse.Namespace) -> int:
    try:
        name = csi_conn.wait_for_driver_name(args.csi_address, args.timeout, state.done)
    except csi_conn.DriverUnusable as e:
        log.error("%s", e)
        return 1
    if name is None:
        return 0  # stopped while waiting
    sock = registration_socket(args.plugin_registration_path, name)
    state.driver_name = name
    try:
        server = _serve(state, sock, args.kubelet_registration_path)
    except (EndpointRefused, RuntimeError, OSError) as e:
        log.error("cannot serve the registration socket %s: %s", sock, e)
        return 1
    inode = sock.lstat().st_ino
    state.socket = sock
    log.info(
        "registration socket %s serves driver %s (kubelet endpoint %s, versions %s); waiting "
        "for the kubelet",
        sock,
        name,
        args.kubelet_registration_path,
        ",".join(SUPPORTED_VERSIONS),
    )
    state.done.wait()
    # The socket goes first: the kubelet deregisters on its removal, not on a dead server.
    _remove_if_ours(sock, inode)
    server.stop(grace=2).wait()
    return state.exit_code
