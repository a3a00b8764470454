"""A small API server for the kubectl plugin's tests: it answers the GETs `why` makes with the
objects of a case (tests/unit/why_cases.py), as the real one answers them (JSON, lists with
`items`, 404 as a Status), and the driver's ledger view through the service proxy path. It
records every request, so a test can say what the plugin asked and that it only read."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]
TOKEN = "why-reader-token"

NAMESPACED = {"pods": "Pod", "persistentvolumeclaims": "PersistentVolumeClaim"}
CLUSTER = {
    "persistentvolumes": "PersistentVolume",
    "nodes": "Node",
    "storageclasses": "StorageClass",
    "csidrivers": "CSIDriver",
    "csinodes": "CSINode",
    "volumeattachments": "VolumeAttachment",
    "events": "Event",
}
PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/]+)/proxy/ledger/v1/volumes/(.+)$")


@dataclass
class FakeCluster:
    objects: list[Obj]
    ledger: dict[str, Obj]
    # Paths (prefixes) answered 403, as RBAC would.
    forbidden: tuple[str, ...] = ()
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, auth

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Obj]:
        if any(path.startswith(p) for p in self.forbidden):
            return 403, _status(403, "Forbidden", f"forbidden: {path}")
        proxied = PROXY.match(path)
        if proxied:
            view = self.ledger.get(proxied.group(3))
            return 200, view or {"schema": "csi-hostpath.ledger-view/v1", "known": False}
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif parts[:3] == ["apis", "storage.k8s.io", "v1"]:
            rest = parts[3:]
        else:
            return 404, _status(404, "NotFound", path)
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name = rest[0], (rest[1] if len(rest) > 1 else "")
        kind = NAMESPACED.get(resource) or CLUSTER.get(resource)
        if kind is None:
            return 404, _status(404, "NotFound", path)
        found = [
            o
            for o in self.objects
            if o["kind"] == kind
            and (not namespace or o["metadata"].get("namespace") == namespace)
            and _selected(o, query.get("fieldSelector", [""])[0])
        ]
        if name:
            match = [o for o in found if o["metadata"]["name"] == name]
            if not match:
                return 404, _status(404, "NotFound", f'{resource} "{name}" not found')
            return 200, match[0]
        return 200, {"kind": f"{kind}List", "apiVersion": "v1", "items": found}


def _selected(obj: Obj, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        here: Any = obj
        for step in key.split("."):
            here = here.get(step) if isinstance(here, dict) else None
        if str(here or "") != value:
            return False
    return True


def _status(code: int, reason: str, message: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


@contextmanager
def serving(cluster: FakeCluster, tmp_path: Path) -> Iterator[Path]:
    """Serve the cluster on a free port; yield a kubeconfig (context `fake`, namespace shop)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            cluster.requests.append(("GET", url.path, self.headers.get("Authorization", "")))
            status, body = cluster.answer(url.path, parse_qs(url.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self) -> None:
            cluster.requests.append((self.command, urlsplit(self.path).path, ""))
            self.send_response(405)
            self.end_headers()

        do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "fake",
                        "cluster": {"server": f"http://127.0.0.1:{server.server_port}"},
                    }
                ],
                "users": [{"name": "reader", "user": {"token": TOKEN}}],
                "contexts": [
                    {
                        "name": "fake",
                        "context": {"cluster": "fake", "user": "reader", "namespace": "shop"},
                    }
                ],
                "current-context": "fake",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
