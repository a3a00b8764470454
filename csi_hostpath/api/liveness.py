"""Liveness is served apart from the work: Identity and gRPC health Check run on their own small
thread pool, so calls that stall the RPC workers (a request body that never arrives holds a worker
while grpc waits for it; a slow copy; a thread waiting on sqlite's writer lock) never stall Probe.

grpcio runs a handler on `behavior.experimental_thread_pool` when the behavior has one
(grpc/_server.py, `_select_thread_pool_for_behavior`); the request is also read on that pool.
This interceptor must be the outermost one, so the handler it returns is the one grpc runs.

Stalled calls of the liveness methods themselves must not take that pool either: one connection
may hold at most STREAMS_PER_CONNECTION streams (grpc refuses the rest with RST_STREAM), fewer than
the pool's workers, and a call whose body never arrives is cancelled (api/body_deadline.py).
"""

from __future__ import annotations

from concurrent import futures

import grpc

from csi_hostpath.api.body_deadline import BodyWatchdog, with_body_deadline
from csi_hostpath.api.unary_interceptor import UnaryInterceptor

LIVENESS_METHODS = frozenset(
    {
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/GetPluginCapabilities",
        "/csi.v1.Identity/Probe",
        "/grpc.health.v1.Health/Check",
    }
)
STREAMS_PER_CONNECTION = 16
# More than one connection may hold: its stalled Probes leave workers for the kubelet's.
LIVENESS_WORKERS = STREAMS_PER_CONNECTION + 4


class LivenessPool(UnaryInterceptor):
    def __init__(self, workers: int = LIVENESS_WORKERS) -> None:
        self.pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="liveness")
        self.watchdog = BodyWatchdog()

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        pool = self.pool if method in LIVENESS_METHODS else None
        return with_body_deadline(handler, method, self.watchdog, pool)

    def shutdown(self) -> None:
        self.watchdog.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


def server_options() -> list[tuple[str, int]]:
    return [("grpc.so_reuseport", 0), ("grpc.max_concurrent_streams", STREAMS_PER_CONNECTION)]


def max_concurrent_rpcs(workers: int) -> int:
    """Beyond this many calls in flight grpc answers RESOURCE_EXHAUSTED at once instead of queueing
    without bound behind stalled workers."""
    return max(64, 4 * workers)
