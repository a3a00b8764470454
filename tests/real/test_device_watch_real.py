"""A loop device detached behind the driver's back shows abnormal at once, on real devices.

On real loop devices through a real driver: `losetup -d` of a staged block volume's
device shows as abnormal at once (the kernel's uevent on its netlink socket), in the log and in
`inspect`, well before the next periodic heartbeat. Fake twin: tests/unit/test_device_watch.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support import helpers as h
from tests.support.processes import inspect


def test_a_loop_device_detached_behind_the_drivers_back(spawn: Any, workdir: Path) -> None:
    handle, client = spawn(
        "ctrl", "--pool-dir", str(workdir / "pool"), "--heartbeat-interval", "60"
    )
    vol, staging, target = h.in_use(client, workdir, "lost", h.block_cap())
    backing = workdir / "pool" / "volumes" / f"{vol.volume_id}.img"
    found = subprocess.run(
        ["losetup", "-n", "-O", "NAME", "-j", str(backing)],
        capture_output=True,
        text=True,
        check=True,
    )
    [loop] = found.stdout.split()
    started = time.monotonic()
    subprocess.run(["losetup", "-d", loop], check=True)
    deadline = started + 10
    while "is ABNORMAL" not in handle.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    noticed = time.monotonic() - started
    assert f"volume {vol.volume_id} is ABNORMAL" in handle.log(), handle.log()[-3000:]
    assert noticed < 5, f"noticed after {noticed:.1f}s"
    health = inspect(workdir, vol.volume_id)["health"]
    while health["state"] != "abnormal" and time.monotonic() < deadline:
        time.sleep(0.1)
        health = inspect(workdir, vol.volume_id)["health"]
    assert health["state"] == "abnormal" and loop in health["detail"], health
    h.node_unpublish(client, vol.volume_id, target)
    h.unstage(client, vol.volume_id, staging)
