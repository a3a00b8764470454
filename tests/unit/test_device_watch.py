"""Issue 12: a loop device detached behind the driver's back shows as abnormal at once (the
kernel's uevent, Loop.watch), in the log, the heartbeat and inspect's health row; the driver's own
detach at unstage does not. On the fake kernel (no root); the real twin is
tests/test_device_watch_real.py."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from csi_hostpath.system.fake import fake_system
from tests import helpers as h
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
        outside.loop.detach(device.path)

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
