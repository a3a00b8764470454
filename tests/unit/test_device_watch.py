"""A loop device detached behind the driver's back shows abnormal at once, on the fake kernel.

A loop device detached behind the driver's back shows as abnormal at once (the
kernel's uevent, Loop.watch), in the log, the heartbeat and inspect's health row; the driver's own
detach at unstage does not. On the fake kernel (no root); the real twin is
tests/real/test_device_watch_real.py."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from csi_hostpath.core.model import AccessMode, AccessType, NodeStaging
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.service.node.device_watch import DeviceWatch
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.fake import fake_system
from tests.support import helpers as h
from tests.unit.builders import node_context
from tests.unit.test_busy_holders import fake_driver, inspect


def _wait(predicate: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def test_a_device_detached_behind_the_drivers_back_is_abnormal_at_once(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="csi_hostpath")
    # A heartbeat far away: what inspect shows comes from the uevent's beat, not a periodic one.
    with fake_driver(workdir, "--heartbeat-interval", "60") as (client, kernel):
        vol, _staging, _target = h.in_use(client, workdir, "lost", h.block_cap())
        _wait(lambda: inspect(workdir, vol.volume_id)["health"]["state"] == "ok")
        assert inspect(workdir, vol.volume_id)["health"]["state"] == "ok"

        outside = fake_system(workdir / "other", kernel=kernel)  # losetup, on the same kernel
        [device] = outside.loop.list()
        outside.loop.detach(device)

        _wait(lambda: "is ABNORMAL" in caplog.text)
        assert f"volume {vol.volume_id} is ABNORMAL" in caplog.text
        assert device.path in caplog.text
        _wait(lambda: inspect(workdir, vol.volume_id)["health"]["state"] == "abnormal")
        health = inspect(workdir, vol.volume_id)["health"]
        assert health["state"] == "abnormal" and "behind the driver's back" in health["detail"]


def test_the_drivers_own_unstage_is_not_abnormal(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="csi_hostpath")
    with fake_driver(workdir) as (client, _kernel):
        for i in range(5):
            vol, staging, target = h.in_use(client, workdir, f"v{i}", h.mount_cap("ext4"))
            h.release(client, vol.volume_id, staging, target)
        time.sleep(0.3)  # the uevents' threads
    assert "ABNORMAL" not in caplog.text


def test_a_uevent_looks_only_at_its_device_and_holds_no_healthy_volume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every uevent on the host (each NodeStage and NodeUnstage sends two) read every
    # staging of the node, and held each matching volume's guard while it looked, so a CO call
    # arriving then was refused ABORTED ("device check"; make bench's lifecycle hit it).
    store = Store(tmp_path / "state.db")
    system = fake_system(tmp_path / "pool")
    (tmp_path / "pool").mkdir()
    backing = tmp_path / "pool" / "v.img"
    system.pool.create(backing, 8 << 20)
    volume_id = "vol-" + "1" * 32
    device = system.loop.attach(backing, loop_tag("node-a", volume_id))
    staged = NodeStaging(
        volume_id, "/s", AccessType.BLOCK, AccessMode.SINGLE_NODE_WRITER, "", device.path, 1, 0.0
    )
    store.save_staging(staged)
    ctx = node_context(tmp_path / "state", store, system, PoolLayout(tmp_path / "pool"))
    inflight = ctx.inflight
    watch = DeviceWatch(ctx, lambda _v: None)

    def every_staging() -> None:
        raise AssertionError("a uevent read every staging")

    holds: list[str] = []
    hold = inflight.hold

    def counted(key: str, operation: str) -> object:
        holds.append(key)
        return hold(key, operation)

    monkeypatch.setattr(store, "stagings", every_staging)
    monkeypatch.setattr(inflight, "hold", counted)
    watch.device_changed("/dev/loop999")
    watch.device_changed(device.path)
    assert holds == [] and watch.abnormal == {}
    system.loop.detach(device)
    watch.device_changed(device.path)
    assert holds == [volume_id] and volume_id in watch.abnormal
    store.close()
