"""A small HTTP server whose GET /healthz answers what a check function says.

Each request runs on its own thread, so a check that waits for its timeout never holds up the
next probe. `:PORT` listens on every address, IPv6 and IPv4 alike where the pod has IPv6 (as Go's
net.Listen does), else on every IPv4 address.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from csi_hostpath.sidecars._log import log

# (HTTP status, body): 200 and "ok" when healthy, otherwise the reason a person can act on.
Check = Callable[[], tuple[int, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], check: Check, family: int) -> None:
        self.address_family = family
        self.check = check
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/healthz":
            self._answer(404, "not found: only /healthz is served here")
            return
        try:
            status, body = self.server.check()
        except Exception as e:  # a probe answers; it never drops the request
            log.exception("health check raised")
            status, body = 500, f"health check failed: {e}"
        if status != 200:
            log.warning("health check failed (%d): %s", status, body)
        self._answer(status, body)

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s: " + format, self.client_address[0], *args)


def _listen(host: str, port: int, check: Check) -> _Server:
    if host and ":" not in host:
        return _Server((host, port), check, socket.AF_INET)
    try:
        return _Server((host or "::", port), check, socket.AF_INET6)
    except OSError:
        if host:
            raise
        return _Server(("0.0.0.0", port), check, socket.AF_INET)  # a pod without IPv6


class HealthServer:
    def __init__(self, address: tuple[str, int], check: Check) -> None:
        self._server = _listen(*address, check)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="healthz", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving GET /healthz on port %d", self.port)

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never began
            self._server.shutdown()
        self._server.server_close()
