"""The two sidecars' calls to the CSI driver: learn its name once it answers, and probe it.

Waiting follows csi-lib-utils' connection.Connect as both upstream sidecars use it: no limit on
how long the driver may take to appear, a reconnect at least every second, and a log line every
ten seconds while it keeps everyone waiting.
"""

from __future__ import annotations

import os
import threading
import time

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.sidecars._log import log

# grpc's own reconnect backoff grows to two minutes; a driver that comes up must be seen at once.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)

STILL_WAITING_EVERY = 10.0
# A driver still starting, or not listening yet: try again. Anything else is an answer.
_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class DriverUnusable(RuntimeError):
    """The socket answers, but not as a CSI driver we can name."""


def channel(path: str) -> grpc.Channel:
    return grpc.insecure_channel(f"unix://{path}", options=CHANNEL_OPTIONS)


def describe(error: grpc.RpcError) -> str:
    return f"{error.code().name}: {error.details()}"


def wait_for_driver_name(path: str, timeout: float, stop: threading.Event) -> str | None:
    """GetPluginInfo's name, asked until the driver answers (each try may take `timeout`); None
    if `stop` is set first. A driver that answers with an error or an empty name is refused."""
    started = last_said = time.monotonic()
    log.info("waiting for the CSI driver at %s (GetPluginInfo)", path)
    with channel(path) as ch:
        stub = pb_grpc.IdentityStub(ch)
        while not stop.is_set():
            try:
                info = stub.GetPluginInfo(
                    pb.GetPluginInfoRequest(), timeout=timeout, wait_for_ready=True
                )
            except grpc.RpcError as e:
                if e.code() not in _TRANSIENT:
                    raise DriverUnusable(
                        f"GetPluginInfo on {path} failed: {describe(e)}; is a CSI driver "
                        "listening on --csi-address?"
                    ) from None
                now = time.monotonic()
                if now - last_said >= STILL_WAITING_EVERY:
                    log.info(
                        "still waiting for the CSI driver at %s after %.0f s (%s)",
                        path,
                        now - started,
                        describe(e),
                    )
                    last_said = now
                stop.wait(0.5)
                continue
            if not info.name:
                raise DriverUnusable(f"the CSI driver at {path} answered an empty driver name")
            log.info(
                "CSI driver %s (version %s) answers at %s", info.name, info.vendor_version, path
            )
            return str(info.name)
    return None


def probe(path: str, timeout: float) -> tuple[bool, str]:
    """One Probe over a new connection, connect included in `timeout`, as livenessprobe does per
    request (a driver that restarted behind a new socket is reached at once). (ready, reason)."""
    if not os.path.exists(path):
        return False, f"the CSI driver's socket {path} does not exist"
    try:
        with channel(path) as ch:
            reply = pb_grpc.IdentityStub(ch).Probe(pb.ProbeRequest(), timeout=timeout)
    except grpc.RpcError as e:
        return False, f"Probe on {path} failed: {describe(e)}"
    # CSI: "If not present, the caller SHALL assume that the plugin is in a ready state".
    if reply.HasField("ready") and not reply.ready.value:
        return False, "driver responded but is not ready"
    return True, "ok"
