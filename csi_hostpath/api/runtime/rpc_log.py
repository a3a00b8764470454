"""One line per RPC: method, volume, node, duration, code; and the RPC metrics. Secrets are never
logged: only the named identifier fields below are read from a request.

The duration runs from the moment the request body arrived to the answer, so it includes the time
the call waited in its executor's queue (api/runtime/adapter.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("csi_hostpath.rpc")
_IDENTIFIERS = ("volume_id", "node_id", "name", "snapshot_id", "source_volume_id")
_QUIET = ("/csi.v1.Identity/Probe", "/grpc.health.v1.Health/Check")

Observe = Callable[[str, str, float, float], None]


def _identifiers(request: Any) -> str:
    parts = []
    for field in _IDENTIFIERS:
        value = getattr(request, field, "")
        if isinstance(value, str) and value:
            parts.append(f"{field}={value[:130]!r}")
    return " ".join(parts)


class RpcLog:
    def __init__(self, observe: Observe | None = None) -> None:
        self._observe = observe

    def record(self, method: str, request: Any, code: str, seconds: float, queued: float) -> None:
        """method: the full path (/csi.v1.Node/NodeStageVolume); code: a status code's name;
        seconds: from the body's arrival to the answer; queued: of those, waiting for a thread."""
        short = method.rsplit("/", 1)[-1]
        if self._observe is not None:
            self._observe(short, code, seconds, queued)
        level = logging.DEBUG if method in _QUIET else logging.INFO
        if code != "OK":
            level = logging.WARNING
        if log.isEnabledFor(level):
            log.log(
                level,
                "rpc method=%s %s duration_ms=%.1f queued_ms=%.1f code=%s",
                short,
                _identifiers(request),
                seconds * 1000,
                queued * 1000,
                code,
            )
