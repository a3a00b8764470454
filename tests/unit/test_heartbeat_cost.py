"""A node call's heartbeat work does not grow with what the node holds.

A node call's heartbeat work must not grow with what the node holds. NodeStage,
NodePublish, NodeUnpublish and NodeUnstage each write the one volume's heartbeat entry (and the
node's small record), never the other volumes'; ControllerPublish learns that the node exists
from its small record, without reading what it has staged. What the node reports stays what it
reported before (inspect and the node a volume moves to read it), and a record written by an
older version, with every volume inline, is still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from csi_hostpath.core.naming import node_key
from csi_hostpath.daemon.server import Driver
from csi_hostpath.store import pool_layout
from csi_hostpath.store.pool_layout import PoolLayout
from tests.conftest import Client
from tests.support import helpers as h

NEIGHBOURS = 3


def test_node_calls_write_only_their_own_volume(
    drv: tuple[Driver, Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, client = drv
    layout = PoolLayout(driver.config.pool_dir)
    cap = h.mount_cap("ext4")
    neighbours = []
    for index in range(NEIGHBOURS):
        vol = h.create(client, f"neighbour-{index}", cap, 16 * h.MiB)
        staging = tmp_path / f"staging-{index}"
        staging.mkdir()
        h.stage(client, vol, staging, cap, h.publish(client, vol.volume_id, "node-a", cap))
        neighbours.append(vol.volume_id)
    vol = h.create(client, "the-one", cap, 16 * h.MiB)
    staging, target = tmp_path / "staging", tmp_path / "pod" / "mount"
    staging.mkdir()

    writes: list[tuple[Path, bytes]] = []
    reads: list[Path] = []
    write, read = pool_layout.write_atomically, pool_layout._read_json

    def spy_write(path: Path, data: bytes, *, durable: bool = True) -> None:
        writes.append((path, data))
        write(path, data, durable=durable)

    def spy_read(path: Path) -> object:
        reads.append(path)
        return read(path)

    monkeypatch.setattr(pool_layout, "write_atomically", spy_write)
    monkeypatch.setattr(pool_layout, "_read_json", spy_read)
    node_dir = driver.config.pool_dir / "nodes" / node_key("node-a")

    context = h.publish(client, vol.volume_id, "node-a", cap)
    assert not [p for p in reads if p.parent == node_dir], "ControllerPublish read the volumes"
    h.stage(client, vol, staging, cap, context)
    assert layout.heartbeat("node-a").volumes[vol.volume_id]["staging"] == str(staging)  # type: ignore[union-attr]
    h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=context)
    entry = layout.heartbeat("node-a").volumes[vol.volume_id]  # type: ignore[union-attr]
    assert str(target) in json.dumps(entry)
    h.node_unpublish(client, vol.volume_id, target)
    h.unstage(client, vol.volume_id, staging)
    beat = layout.heartbeat("node-a")
    assert beat is not None and vol.volume_id not in beat.volumes
    assert set(beat.volumes) == set(neighbours)

    assert writes, "the node calls reported nothing"
    for path, data in writes:
        assert not any(n.encode() in data for n in neighbours), f"{path} carries the neighbours"
        assert path.name in (f"{vol.volume_id}.json", f"{node_key('node-a')}.json"), path


def test_an_older_record_with_inline_volumes_is_still_read(tmp_path: Path) -> None:
    layout = PoolLayout(tmp_path)
    layout.ensure()
    volume_id = "vol-" + "0" * 32
    old = {"node_id": "node-b", "at": 1.0, "pid": 1, "volumes": {volume_id: {"staging": "/s"}}}
    (tmp_path / "nodes" / f"{node_key('node-b')}.json").write_text(json.dumps(old))
    assert layout.heartbeat("node-b").volumes == {volume_id: {"staging": "/s"}}  # type: ignore[union-attr]
    (only,) = layout.heartbeats(volume_id)
    assert only.volumes == {volume_id: {"staging": "/s"}}
    assert layout.heartbeats("vol-" + "1" * 32)[0].volumes == {}
    # The node's next whole beat replaces the inline list with its files.
    layout.beat("node-b", {})
    assert layout.heartbeat("node-b").volumes == {}  # type: ignore[union-attr]


def test_a_whole_beat_rewrites_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The start's whole beat used to create and rename one file per staged volume even when
    # nothing had changed: 1.6 s of a 500-volume restart.
    layout = PoolLayout(tmp_path)
    layout.ensure()
    volumes = {f"vol-{i:032x}": {"staging": f"/s/{i}"} for i in range(20)}
    layout.beat("node-a", volumes)
    writes: list[Path] = []
    write = pool_layout.write_atomically

    def spy_write(path: Path, data: bytes, *, durable: bool = True) -> None:
        writes.append(path)
        write(path, data, durable=durable)

    monkeypatch.setattr(pool_layout, "write_atomically", spy_write)
    changed = next(iter(volumes))
    layout.beat("node-a", volumes | {changed: {"staging": "/elsewhere"}})
    assert [p.name for p in writes] == [f"{changed}.json", f"{node_key('node-a')}.json"]
    assert layout.heartbeat("node-a").volumes[changed] == {"staging": "/elsewhere"}  # type: ignore[union-attr]


def test_an_unclaimed_volume_the_co_unstaged_is_no_longer_listed(
    drv: tuple[Driver, Client], tmp_path: Path
) -> None:
    # chaos seed 4241986380, lifecycle 114: node-a killed -9 inside NodeStage after the mount and
    # before the record; its restart left the mounted device in place as "unclaimed"; the CO's
    # NodeUnstage took it down, but the entry stayed listed, so node-b's NodeStage was refused
    # ABORTED ("still staged on node-a") for as long as node-a lived.
    driver, client = drv
    assert driver.node is not None
    layout = PoolLayout(driver.config.pool_dir)
    volume_id = "vol-" + "2" * 32
    staging = tmp_path / "staging"
    staging.mkdir()
    agent = driver.node.agent
    agent.unclaimed.leave(
        volume_id, {"unclaimed": "no record", "device": "/dev/loop9", "mounts": []}
    )
    layout.beat_volume("node-a", volume_id, agent.unclaimed.get(volume_id))
    assert volume_id in layout.heartbeat("node-a").volumes  # type: ignore[union-attr]
    h.unstage(client, volume_id, staging)
    assert volume_id not in layout.heartbeat("node-a").volumes  # type: ignore[union-attr]
    assert volume_id not in agent.unclaimed
