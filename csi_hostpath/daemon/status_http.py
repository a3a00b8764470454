"""The driver's read-only HTTP port (--metrics-address): Prometheus metrics, and with
--ledger-view what the ledger knows of one volume (service/ledger_view.py) at
/ledger/v1/volumes/<volume-id>, as JSON, for `kubectl csi-hostpath why`.

It answers GET and HEAD only, and nothing it serves writes anything. In a cluster the chart puts
a Service of its own in front of this port, so that a user's RBAC can reach it through the API
server's service proxy (`get` on `services/proxy` of that one name) and nothing else of the
driver.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger(__name__)

LEDGER_PREFIX = "/ledger/v1/volumes/"
NO_VIEW = "this process serves no ledger view (a node plugin, or no --ledger-view)"

LedgerView = Callable[[str], dict[str, Any]]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _IPv6Server(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the driver's log."""


def _json(start: StartResponse, status: str, body: dict[str, Any]) -> Iterable[bytes]:
    data = json.dumps(body, sort_keys=True).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def status_app(registry: CollectorRegistry, ledger_view: LedgerView | None) -> Any:
    """The WSGI app: the ledger view under LEDGER_PREFIX, the metrics everywhere else (as
    prometheus_client serves them, on any path)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        path = str(environ.get("PATH_INFO", ""))
        if not path.startswith(LEDGER_PREFIX):
            result: Iterable[bytes] = metrics(environ, start)
            return result
        if ledger_view is None:
            return _json(
                start,
                "404 Not Found",
                {"error": NO_VIEW},
            )
        volume_id = path[len(LEDGER_PREFIX) :]
        try:
            return _json(start, "200 OK", ledger_view(volume_id))
        except Exception as e:
            log.exception("ledger view of %r failed", volume_id)
            return _json(start, "500 Internal Server Error", {"error": f"{type(e).__name__}: {e}"})

    return app


def serve_status(
    host: str, port: int, registry: CollectorRegistry, ledger_view: LedgerView | None
) -> WSGIServer:
    """Serve on host:port in a daemon thread; stop it with shutdown() and server_close()."""
    server_class = _IPv6Server if ":" in host else _ThreadingServer
    server = make_server(
        host, port, status_app(registry, ledger_view), server_class, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="status-http", daemon=True).start()
    return server
