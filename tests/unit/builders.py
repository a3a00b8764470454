"""Builders the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from csi_hostpath.cli import build_parser, config_from_args
from csi_hostpath.daemon.config import Config, Mode
from csi_hostpath.daemon.controller_role import controller_context as make_controller_context
from csi_hostpath.daemon.node_role import node_context as make_node_context
from csi_hostpath.daemon.server import Driver, build_driver, start
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System
from csi_hostpath.system.fake import fake_system
from tests.conftest import Client, driver_args


@contextmanager
def quiet_fake_driver(
    tmp_path: Path, capacity_bytes: int, extra: Sequence[str] = ()
) -> Iterator[tuple[Driver, Client]]:
    """A driver in --mode all on the fake system layer, served on a temp socket, and its client;
    extra: more `serve` flags.

    A long heartbeat keeps the background loops out of the way: only the RPCs write, and a test
    that wants a pass (a reconcile, a fence check) runs it itself."""
    args = ["serve", *driver_args(tmp_path, "f"), "--heartbeat-interval", "3600", *extra]
    config = config_from_args(build_parser().parse_args(args))
    driver = build_driver(
        config, system=fake_system(config.pool_dir, capacity_bytes=capacity_bytes)
    )
    start(driver)
    client = Client(config.socket_path)
    try:
        yield driver, client
    finally:
        client.close()
        driver.stop(grace=1)


def node_context(
    state_dir: Path, store: Store, system: System, layout: PoolLayout, node_id: str = "node-a"
) -> NodeContext:
    """What a node's parts share, from a Config of the defaults: for a test of one part."""
    config = Config(f"unix://{state_dir}/csi.sock", node_id, state_dir, layout.root)
    return make_node_context(config, store, system, layout)


def controller_context(
    store: Store, system: System, layout: PoolLayout, node_id: str = "node-a", **flags: Any
) -> ControllerContext:
    """What a controller's parts share, from a Config of the defaults and the given flags, in
    controller mode (no node of its own in the process): for a test of one part."""
    config = Config(
        "unix:///unused", node_id, layout.root.parent, layout.root, mode=Mode.CONTROLLER, **flags
    )
    return make_controller_context(config, store, system, layout)
