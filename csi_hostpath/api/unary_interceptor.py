"""The driver's interceptors act on unary-unary calls only, the shape of every CSI RPC; any other
handler (or none, for an unknown method) passes through untouched."""

from __future__ import annotations

from collections.abc import Callable

import grpc


class UnaryInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler that serves method in place of handler, whose unary_unary is set."""
        raise NotImplementedError

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        return self.wrap(handler, handler_call_details.method)
