"""One line per RPC: method, volume, node, duration, code; and the RPC metrics. Secrets are never
logged: only the named identifier fields below are read from a request."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from csi_hostpath.api.unary_interceptor import UnaryInterceptor

log = logging.getLogger("csi_hostpath.rpc")
_IDENTIFIERS = ("volume_id", "node_id", "name", "snapshot_id", "source_volume_id")
_QUIET = ("/csi.v1.Identity/Probe", "/grpc.health.v1.Health/Check")


def _identifiers(request: Any) -> str:
    parts = []
    for field in _IDENTIFIERS:
        value = getattr(request, field, "")
        if isinstance(value, str) and value:
            parts.append(f"{field}={value[:130]!r}")
    return " ".join(parts)


class LoggingInterceptor(UnaryInterceptor):
    def __init__(self, observe: Callable[[str, str, float], None] | None = None) -> None:
        self._observe = observe

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary
        level = logging.DEBUG if method in _QUIET else logging.INFO

        def logged(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            code = "OK"
            try:
                return inner(request, context)
            except Exception:
                code = getattr(context.code(), "name", None) or "UNKNOWN"
                raise
            finally:
                elapsed = time.perf_counter() - start
                elapsed_ms = elapsed * 1000
                if self._observe is not None:
                    self._observe(method.rsplit("/", 1)[-1], code, elapsed)
                if log.isEnabledFor(level) or code != "OK":
                    log.log(
                        level if code == "OK" else logging.WARNING,
                        "rpc method=%s %s duration_ms=%.1f code=%s",
                        method.rsplit("/", 1)[-1],
                        _identifiers(request),
                        elapsed_ms,
                        code,
                    )

        return grpc.unary_unary_rpc_method_handler(
            logged,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
