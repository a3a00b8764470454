"""Each stage and publish looks its mounts up inside the per-RPC scope of shared lookups.

The scope in which an RPC's mount lookups share one read of the mount table is opened by the
call pipeline (api/runtime/pipeline.py) around every servicer method, on the server a test
talks to; that no servicer body opens it by hand is tests/unit/test_pipeline_rules.py's."""

from __future__ import annotations

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
