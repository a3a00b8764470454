"""Liveness is served apart from the work: Identity and gRPC health Check run on their own small
thread pool, so calls that stall the RPC workers (a request body that never arrives holds a worker
while grpc waits for it; a slow copy; a thread waiting on sqlite's writer lock) never stall Probe.

grpcio runs a handler on `behavior.experimental_thread_pool` when the behavior has one
(grpc/_server.py, `_select_thread_pool_for_behavior`); the request is also read on that pool.
This interceptor must be the outermost one, so the handler it returns is the one grpc runs.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

LIVENESS_METHODS = frozenset(
    {
        "/csi.v1.Identity/GetPluginInfo",
        "/csi.v1.Identity/GetPluginCapabilities",
        "/csi.v1.Identity/Probe",
        "/grpc.health.v1.Health/Check",
    }
)
LIVENESS_WORKERS = 4


class _OnPool:
    """A unary behavior that tells grpc which executor to run it on."""

    def __init__(self, inner: Callable[[Any, grpc.ServicerContext], Any], pool: Any) -> None:
        self._inner = inner
        self.experimental_thread_pool = pool

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._inner(request, context)


class LivenessPool(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, workers: int = LIVENESS_WORKERS) -> None:
        self.pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="liveness")

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if (
            handler is None
            or handler.unary_unary is None
            or handler_call_details.method not in LIVENESS_METHODS
        ):
            return handler
        return grpc.unary_unary_rpc_method_handler(
            _OnPool(handler.unary_unary, self.pool),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def max_concurrent_rpcs(workers: int) -> int:
    """Beyond this many calls in flight grpc answers RESOURCE_EXHAUSTED at once instead of queueing
    without bound behind stalled workers."""
    return max(64, 4 * workers)
