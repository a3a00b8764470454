"""The per-RPC scope of shared mount lookups is opened where a reader of the servicer sees it.

The per-RPC scope in which mount lookups share one read of the mount table is opened where a
reader of the servicer sees it, `with self.shared_lookups():` in each RPC's body, not behind the
@rpc decorator; and each stage and publish still looks its mounts up inside it."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.cli import build_parser, config_from_args
from csi_hostpath.daemon.server import build_driver, start
from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.fake import fake_system
from csi_hostpath.system.pinned import Pinned
from tests.conftest import Client, driver_args
from tests.support import helpers as h

API = Path(__file__).resolve().parents[2] / "csi_hostpath" / "api"
# These answer from constants: they look nothing up.
NO_LOOKUPS = frozenset({"NodeGetCapabilities", "ControllerGetCapabilities"})


def _rpc_methods(path: Path) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "rpc" for d in node.decorator_list
        ):
            yield node


def _opens_the_scope(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.With) and any(
        ast.unparse(item.context_expr) == "self.shared_lookups()" for item in statement.items
    )


@pytest.mark.parametrize("servicer", ["node.py", "controller.py"])
def test_each_rpc_opens_the_scope_in_its_own_body(servicer: str) -> None:
    methods = list(_rpc_methods(API / servicer))
    assert methods
    hidden = [
        m.name for m in methods if m.name not in NO_LOOKUPS and not _opens_the_scope(m.body[0])
    ]
    assert hidden == []


def test_the_rpc_decorator_opens_no_scope() -> None:
    rpc = next(
        node
        for node in ast.walk(ast.parse((API / "status.py").read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "rpc"
    )
    assert not [node for node in ast.walk(rpc) if isinstance(node, ast.With)]


def test_stage_and_publish_look_mounts_up_inside_the_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["serve", *driver_args(tmp_path, "f"), "--heartbeat-interval", "3600"]
    config = config_from_args(build_parser().parse_args(args))
    system = fake_system(config.pool_dir, capacity_bytes=256 << 20)
    depth = [0]
    lookups: list[bool] = []  # for each lookup: was it inside an RPC's scope?
    find, find_on = system.mounts.find, system.mounts.find_on

    @contextlib.contextmanager
    def counted() -> Iterator[None]:
        depth[0] += 1
        try:
            yield
        finally:
            depth[0] -= 1

    def recorded(target: str) -> MountEntry | None:
        lookups.append(depth[0] > 0)
        return find(target)

    def recorded_on(target: Pinned) -> MountEntry | None:
        lookups.append(depth[0] > 0)
        return find_on(target)

    monkeypatch.setattr(system.mounts, "shared_lookups", counted)
    monkeypatch.setattr(system.mounts, "find", recorded)
    monkeypatch.setattr(system.mounts, "find_on", recorded_on)
    driver = build_driver(config, system=system)
    start(driver)
    client = Client(config.socket_path)
    try:
        cap = h.mount_cap("ext4")
        volume = h.create(client, "scoped", cap, 16 * h.MiB)
        staging, target = tmp_path / "staging", tmp_path / "target"
        lookups.clear()
        h.stage(client, volume, staging, cap, h.publish(client, volume.volume_id, "node-a", cap))
        h.node_publish(client, volume.volume_id, staging, target, cap)
        assert lookups and all(lookups), lookups
    finally:
        client.close()
        driver.stop(grace=1)
