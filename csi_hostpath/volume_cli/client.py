"""The CSI client: one channel to the driver's socket, every call through `call`, which turns a
refusal into a CliError carrying the driver's status code and message."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.runtime.copy_pool import STILL_COPYING
from csi_hostpath.volume_cli.cli_errors import CliError, from_rpc
from csi_hostpath.volume_cli.exit_codes import FAILED, NO_DRIVER

Mode = pb.VolumeCapability.AccessMode
R = TypeVar("R")
# Generous: a copy for a snapshot, a clone or a restore runs inside the call.
CALL_TIMEOUT = 3600.0
CONNECT_TIMEOUT = 5.0


class DriverClient:
    def __init__(self, endpoint: str, guessed: bool = False) -> None:
        self.endpoint = endpoint
        self.guessed = guessed  # the endpoint is ./.run's: nothing said where the driver is
        self._check_socket()
        self.channel = grpc.insecure_channel(endpoint)
        try:
            grpc.channel_ready_future(self.channel).result(timeout=CONNECT_TIMEOUT)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise self._not_running(
                "the socket is there, but nothing answers on it",
                "the driver that served it has stopped: start it again with `make run`, or "
                "point --endpoint at the socket a running driver serves",
            ) from None
        self.identity = pb_grpc.IdentityStub(self.channel)
        self.controller = pb_grpc.ControllerStub(self.channel)
        self.node = pb_grpc.NodeStub(self.channel)
        self._node_id = ""
        self._snmw: bool | None = None

    def _not_running(self, why: str, next_step: str) -> CliError:
        return CliError(NO_DRIVER, f"no driver at {self.endpoint}: {why}", next_step, "UNAVAILABLE")

    def _check_socket(self) -> None:
        if not self.endpoint.startswith("unix://"):
            return
        path = self.endpoint.removeprefix("unix://")
        try:
            os.stat(path)
            _knock(path)
        except PermissionError as e:
            # grpc would only retry until its deadline and say nothing answers: the driver
            # may well be running, and this user is not let in.
            raise CliError(
                FAILED,
                f"permission denied: {e.filename or path} (the driver's socket is root's, mode "
                "0600, and this command runs as uid "
                f"{os.geteuid()})",
                "run it as root (e.g. with sudo), as the driver does",
                "PERMISSION_DENIED",
            ) from None
        except FileNotFoundError:
            pass
        else:
            return
        if self.guessed:
            raise self._not_running(
                f"{path} does not exist, and no .run of `make run` is here or above",
                "run this in the checkout where `make run` serves (or below it), or say where: "
                "--run-dir DIR or --endpoint unix:///path/csi.sock; no driver yet? start one "
                "with `make run`",
            )
        raise self._not_running(
            f"{path} does not exist",
            "start the driver with `make run` in another terminal, or point --endpoint (or "
            "$CSI_HOSTPATH_ENDPOINT) at the socket it serves",
        )

    def close(self) -> None:
        self.channel.close()

    def call(self, method: Callable[..., R], request: Any, what: str, next_step: str = "") -> R:
        try:
            return method(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as e:
            raise from_rpc(e, what, next_step) from None

    def call_waiting(
        self,
        method: Any,
        request: Any,
        what: str,
        tick: Callable[[float], None],
        next_step: str = "",
    ) -> Any:
        """The same, for a call that may take long (a copy): `tick(elapsed)` runs every 0.2 s
        while it is in flight, so a terminal can show that something is happening."""
        start = time.monotonic()
        while True:
            left = CALL_TIMEOUT - (time.monotonic() - start)
            future = method.future(request, timeout=max(left, 1.0))
            while not future.done():
                tick(time.monotonic() - start)
                time.sleep(0.2)
            try:
                return future.result()
            except grpc.RpcError as e:
                # The driver stops waiting for a long copy and answers ABORTED while it goes
                # on (api/runtime/copy_pool.py); the same request waits on the same copy, as a
                # CO does.
                copying = STILL_COPYING in (e.details() or "")
                if copying and time.monotonic() - start < CALL_TIMEOUT:
                    continue
                raise from_rpc(e, what, next_step) from None

    @property
    def node_id(self) -> str:
        if not self._node_id:
            info = self.call(self.node.NodeGetInfo, pb.NodeGetInfoRequest(), "NodeGetInfo")
            self._node_id = info.node_id
        return self._node_id

    def single_node_multi_writer(self) -> bool:
        if self._snmw is None:
            caps = self.call(
                self.controller.ControllerGetCapabilities,
                pb.ControllerGetCapabilitiesRequest(),
                "ControllerGetCapabilities",
            )
            want = pb.ControllerServiceCapability.RPC.SINGLE_NODE_MULTI_WRITER
            self._snmw = any(c.rpc.type == want for c in caps.capabilities)
        return self._snmw


def access_mode(mode: str, single_node_multi_writer: bool) -> int:
    """The CSI access mode Kubernetes sends for a PV access mode: csi-lib-utils
    accessmodes/access_modes.go ToCSIAccessMode, which the provisioner, the attacher and the
    kubelet all use. ReadWriteOnce is SINGLE_NODE_MULTI_WRITER when the driver advertises it."""
    if mode == "rwop":
        return int(
            Mode.SINGLE_NODE_SINGLE_WRITER if single_node_multi_writer else Mode.SINGLE_NODE_WRITER
        )
    if mode == "rox":
        return int(Mode.MULTI_NODE_READER_ONLY)
    return int(
        Mode.SINGLE_NODE_MULTI_WRITER if single_node_multi_writer else Mode.SINGLE_NODE_WRITER
    )


def capability(fs: str, mode: str, single_node_multi_writer: bool) -> pb.VolumeCapability:
    access = Mode(mode=access_mode(mode, single_node_multi_writer))  # type: ignore[arg-type]
    if fs == "block":
        return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(), access_mode=access)
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(fs_type=fs), access_mode=access
    )


def _knock(path: str) -> None:
    """Connect to the socket once and leave: raises PermissionError when this user may not
    connect (EACCES); anything else is for grpc to find and say."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(CONNECT_TIMEOUT)
        try:
            probe.connect(path)
        except PermissionError:
            raise
        except OSError:
            return
