"""Builders the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath.cli import build_parser, config_from_args
from csi_hostpath.daemon.server import Driver, build_driver, start
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
