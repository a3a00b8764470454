"""Loop.watch on the fake and the real kernel: a detach of a loop device is reported, with the
device's path, from a background thread (the real one hears the kernel's uevent via pyudev)."""

from __future__ import annotations

import threading

from .conftest import Env
from .test_system_contract import EXT4_SIZE


def test_a_detach_is_reported_with_the_device(env: Env) -> None:
    device = env.attach("vol", EXT4_SIZE)
    heard: list[str] = []
    detached = threading.Event()

    def changed(path: str) -> None:
        heard.append(path)
        if path == device.path:
            detached.set()

    stop = env.system.loop.watch(changed)
    try:
        env.system.loop.detach(device.path)
        assert detached.wait(5), f"no report of {device.path}; heard {heard}"
    finally:
        stop()
    if not env.real:  # the real watch's thread ends on its own time after stop()
        heard.clear()
        again = env.attach("other", EXT4_SIZE)
        env.system.loop.detach(again.path)
        assert heard == [], "a stopped watch still reports"
