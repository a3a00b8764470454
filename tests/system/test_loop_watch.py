"""Loop.watch on the fake and the real kernel: a detached loop device is reported.

Loop.watch on the fake and the real kernel: a detach of a loop device is reported, with the
device's path, from a background thread (the real one hears the kernel's uevent on its netlink
socket)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.loop_churn import loop_churn

from .conftest import Env
from .system_limits import EXT4_SIZE

LOOP_CTL_ADD, LOOP_CTL_REMOVE = 0x4C80, 0x4C81


def _detach_is_heard(env: Env, name: str) -> list[str]:
    """Attach, watch, detach: the detach is reported with the device's path. Returns the list
    the watch kept appending to, stopped."""
    device = env.attach(name, EXT4_SIZE)
    heard: list[str] = []
    detached = threading.Event()

    def changed(path: str) -> None:
        heard.append(path)
        if path == device.path:
            detached.set()

    stop = env.system.loop.watch(changed)
    try:
        env.system.loop.detach(device)
        assert detached.wait(5), f"no report of {device.path}; heard {heard[-20:]}"
    finally:
        stop()
    return heard


def test_a_detach_is_reported_with_the_device(env: Env) -> None:
    heard = _detach_is_heard(env, "vol")
    if not env.real:  # the real watch's thread ends on its own time after stop()
        heard.clear()
        again = env.attach("other", EXT4_SIZE)
        env.system.loop.detach(again)
        assert heard == [], "a stopped watch still reports"


def test_detaches_are_reported_while_another_process_churns_loop_devices(env: Env) -> None:
    """The kernel is shared: other processes attach and detach loop devices all along. Every
    detach made after watch() returned is heard, however late the watch's thread starts."""
    if not env.real:
        pytest.skip("the churn is another process on the real kernel")
    with loop_churn():
        for round_ in range(5):
            _detach_is_heard(env, f"vol{round_}")


@contextlib.contextmanager
def _a_device_nobody_else_takes(backing: Path) -> Iterator[str]:
    """backing attached to a loop device numbered far above those LOOP_CTL_GET_FREE hands out,
    so no other process on this shared kernel attaches that device once it is detached: their
    events on its path would pass for the one the test waits for."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for candidate in random.sample(range(3000, 4000), 50):
            try:
                index = fcntl.ioctl(control, LOOP_CTL_ADD, candidate)
                break
            except FileExistsError:
                continue
        else:
            raise AssertionError("no free loop device number between 3000 and 4000")
        device = f"/dev/loop{index}"
        try:
            while not os.path.exists(device):  # devtmpfs makes the node a moment later
                time.sleep(0.01)
            subprocess.run(["losetup", device, str(backing)], check=True)
            yield device
        finally:
            subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
            for _ in range(100):  # busy while its detach finishes
                try:
                    fcntl.ioctl(control, LOOP_CTL_REMOVE, index)
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    time.sleep(0.05)
    finally:
        os.close(control)


def test_a_detach_right_after_watch_is_heard_however_late_its_thread_starts(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine the watch's thread may start after the caller has already detached: the
    kernel's uevent must still be heard. The thread is made late on purpose here."""
    if not env.real:
        pytest.skip("the real watch's thread (reading the kernel's netlink socket)")
    from csi_hostpath.system.linux import uevents

    listen = uevents._listen

    def late_listen(*args: Any) -> None:
        time.sleep(0.5)
        listen(*args)

    monkeypatch.setattr(uevents, "_listen", late_listen)
    with _a_device_nobody_else_takes(env.file("vol", EXT4_SIZE)) as device:
        detached = threading.Event()

        def report(path: str) -> None:
            if path == device:
                detached.set()

        stop = env.system.loop.watch(report)
        try:
            # losetup tags the device with the backing file's path.
            (ours,) = [d for d in env.system.loop.list(str(env.work)) if d.path == device]
            env.system.loop.detach(ours)
            assert detached.wait(5), f"no report of {device}"
        finally:
            stop()
