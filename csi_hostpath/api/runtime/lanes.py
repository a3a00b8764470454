"""Where each call's sync work runs: the executors (lanes) behind the asyncio server
(api/runtime/aio_server.py).

A call waiting for its body, or for a thread, is a coroutine on the event loop and holds no
thread. Once its request has arrived, its servicer method runs on one of two bounded executors,
whose queues are FIFO and unbounded in length, so a burst waits its turn and is never refused:

- `work`: `--workers` threads for every call that may block on the kernel, a child process or
  sqlite (stage, publish, create, delete, expand, listing, health of volumes...);
- `liveness`: a few threads of its own for Identity (Probe does a read of state.db and a synced
  4 KiB write, store/probe.py) and for the capability calls, which answer from constants. Stuck
  work can't hold them, and a stalled client can't either: a call reaches an executor only once
  its body has arrived.

The gRPC health service is asyncio itself and answers on the loop.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

LIVENESS_METHODS = frozenset(
    {
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/GetPluginCapabilities",
        "/csi.v1.Identity/Probe",
        # Constant answers, which the sidecars ask for as they start: never behind a burst.
        "/csi.v1.Controller/ControllerGetCapabilities",
        "/csi.v1.Node/NodeGetCapabilities",
        "/csi.v1.GroupController/GroupControllerGetCapabilities",
    }
)
# A Probe takes milliseconds (up to about a second on a state disk slow to sync); the kubelet's
# livenessprobe sends one at a time and each sidecar one at its start, so a few threads serve
# them all without a queue in practice, and a flood of Probes only waits behind Probes.
LIVENESS_WORKERS = 4


class Lanes:
    def __init__(self, workers: int, liveness_workers: int = LIVENESS_WORKERS) -> None:
        self.work = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc")
        self.liveness = futures.ThreadPoolExecutor(
            max_workers=liveness_workers, thread_name_prefix="liveness"
        )

    def executor_for(self, method: str) -> futures.Executor:
        return self.liveness if method in LIVENESS_METHODS else self.work

    def shutdown(self, wait_seconds: float) -> None:
        """Drop the calls still queued, and wait up to wait_seconds for the running ones to
        finish: a sync method can't be interrupted, and one stuck in the kernel must not keep
        the process from stopping."""
        waiters = []
        for pool in (self.work, self.liveness):
            waiter = threading.Thread(
                target=pool.shutdown,
                kwargs={"wait": True, "cancel_futures": True},
                name="executor-shutdown",
                daemon=True,
            )
            waiter.start()
            waiters.append(waiter)
        deadline = time.monotonic() + wait_seconds
        for waiter in waiters:
            waiter.join(timeout=max(0.0, deadline - time.monotonic()))


def server_options() -> list[tuple[str, int]]:
    """No grpc.max_concurrent_streams: grpc core refuses the streams past it (RST_STREAM) from a
    client that sends before it has read the server's SETTINGS, so none is advertised, and a
    connection's calls wait in the executors' queues instead (docs/design.md, "Many calls at
    once")."""
    return [("grpc.so_reuseport", 0)]
