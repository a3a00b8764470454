"""The ledger's read-only view of one volume (--ledger-view) for `kubectl csi-hostpath why`.

The ledger's read-only view of one volume, served beside the metrics (--ledger-view) for
`kubectl csi-hostpath why`: what it says of a volume held, staged and published on a node; the
metrics still served on the same port; and what it refuses (other methods, no ledger)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath.daemon.server import Driver
from csi_hostpath.service.ledger_view import SCHEMA
from tests.conftest import Client
from tests.support import helpers as h
from tests.support.processes import free_port
from tests.unit.builders import quiet_fake_driver


@pytest.fixture
def viewed(tmp_path: Path) -> Iterator[tuple[Driver, Client, int]]:
    port = free_port()
    flags = ["--metrics-address", f"127.0.0.1:{port}", "--ledger-view"]
    with quiet_fake_driver(tmp_path, 256 << 20, flags) as (driver, client):
        yield driver, client, port


def _get(port: int, path: str, method: str = "GET") -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read().decode()
            status = answer.status
    except urllib.error.HTTPError as e:
        body, status = e.read().decode(), e.code
    is_json = body.startswith("{")
    return status, json.loads(body) if is_json else body


def test_a_volume_held_staged_and_published_on_a_node(
    viewed: tuple[Driver, Client, int], tmp_path: Path
) -> None:
    _driver, client, port = viewed
    cap = h.mount_cap("ext4")
    vol = h.create(client, "seen", cap, 32 * h.MiB)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging, target = tmp_path / "globalmount", tmp_path / "pods" / "uid-1" / "mount"
    staging.mkdir()
    target.parent.mkdir(parents=True)
    h.stage(client, vol, staging, cap, ctx)
    h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)

    status, view = _get(port, f"/ledger/v1/volumes/{vol.volume_id}")
    assert status == 200 and view["schema"] == SCHEMA and view["known"] is True
    assert view["name"] == "seen" and view["capacity_bytes"] == 32 * h.MiB
    [holder] = view["holders"]
    assert holder["node"] == "node-a" and holder["generation"] == int(ctx["generation"])
    assert holder["access_mode"] == "SINGLE_NODE_WRITER" and holder["silent"] is False
    assert 0 <= holder["heartbeat_age_seconds"] < 60 and holder["since"] <= view["now"]
    [staged] = view["stagings"]
    assert staged["node"] == "node-a" and staged["staging"] == str(staging)
    assert staged["targets"] == [str(target)]
    assert holder["since"] <= staged["staged_at"] <= view["now"]
    assert [row["action"] for row in view["audit"]] == ["publish"]
    assert view["generation"] == holder["generation"]


def test_an_unknown_volume_is_not_known_and_a_bad_id_is_not_joined_anywhere(
    viewed: tuple[Driver, Client, int],
) -> None:
    port = viewed[2]
    status, view = _get(port, "/ledger/v1/volumes/vol-" + "0" * 32)
    assert status == 200 and view["known"] is False and "holders" not in view
    status, view = _get(port, "/ledger/v1/volumes/..%2F..%2Fstate.db")
    assert status == 200 and view["known"] is False


def test_the_metrics_are_still_served_on_the_same_port(
    viewed: tuple[Driver, Client, int],
) -> None:
    status, body = _get(viewed[2], "/metrics")
    assert status == 200 and "csi_hostpath_stale_publications" in body


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_it_answers_reads_only(viewed: tuple[Driver, Client, int], method: str) -> None:
    status, _ = _get(viewed[2], "/ledger/v1/volumes/vol-" + "0" * 32, method)
    assert status == 405
    status, _ = _get(viewed[2], "/metrics", method)
    assert status == 405


def test_without_the_flag_there_is_no_ledger_view(tmp_path: Path) -> None:
    port = free_port()
    with quiet_fake_driver(tmp_path, 256 << 20, ["--metrics-address", f"127.0.0.1:{port}"]):
        status, body = _get(port, "/ledger/v1/volumes/vol-" + "0" * 32)
        assert status == 404 and "no ledger view" in body["error"]
        assert _get(port, "/metrics")[0] == 200


def test_the_flag_needs_the_metrics_address() -> None:
    from csi_hostpath.cli import build_parser, config_from_args

    args = build_parser().parse_args(
        ["serve", "--endpoint", "unix:///x.sock", "--node-id", "n", "--ledger-view"]
    )
    with pytest.raises(ValueError, match="--metrics-address"):
        config_from_args(args)
