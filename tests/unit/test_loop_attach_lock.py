"""An attach that waits for its new device's node (devtmpfs can trail LOOP_CTL_GET_FREE by up to
2 s) does not hold the driver's free-device lock meanwhile: every other attach would wait with it.

The kernel calls are replaced here (no root, no loop device): GET_FREE answers a new device whose
node is not there yet, and the wait for that node checks that another attach can draw a free
device now. Failed on the old code: the wait ran under the lock, so the second attach's draw
found it taken.
"""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath.system.base import LoopDevice
from csi_hostpath.system.linux import loop_ioctl
from csi_hostpath.system.linux.loop import LinuxLoop


def test_the_wait_for_a_device_node_holds_no_lock_other_attaches_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = LinuxLoop()
    control = tmp_path / "loop-control"
    control.write_bytes(b"")
    backing = tmp_path / "vol.img"
    backing.write_bytes(b"\0" * 4096)
    free = iter([7, 8])
    nodes = {"/dev/loop8"}  # loop7 is new: its node has yet to appear
    configured: dict[str, str] = {}
    seen_while_waiting: list[str] = []

    def ioctl(fd: int, request: int, arg: Any = 0, mutate: bool = True) -> Any:
        assert request == loop_ioctl.LOOP_CTL_GET_FREE
        return next(free)

    def configure(device: str, backing_fd: int, flags: int, name: bytes) -> bool:
        configured[device] = name.decode()
        return True

    def describe(index: int, tag: str) -> LoopDevice:
        return LoopDevice(f"/dev/loop{index}", str(backing), tag, False, 4096)

    def wait_for_node(path: str) -> None:
        # Another thread's attach, here and now: it must draw and configure its own device.
        other = threading.Thread(target=lambda: seen_while_waiting.append(
            loop.attach(backing, "tag-b").path
        ))  # fmt: skip
        drew = loop._free_lock.acquire(blocking=False)
        if drew:
            loop._free_lock.release()
            other.start()
            other.join()
        else:
            seen_while_waiting.append("the free-device lock was held across the wait")
        nodes.add(path)

    monkeypatch.setattr(loop_ioctl, "LOOP_CONTROL", str(control))
    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    monkeypatch.setattr(loop_ioctl, "node_exists", lambda path: path in nodes)
    monkeypatch.setattr(loop_ioctl, "wait_for_node", wait_for_node)
    monkeypatch.setattr(loop_ioctl, "configure", configure)
    monkeypatch.setattr(loop_ioctl, "describe", describe)
    monkeypatch.setattr(LinuxLoop, "_lookup", lambda self, tag: None)
    monkeypatch.setattr(loop_ioctl, "configured_loop_indices", list)  # no device to scan

    device = loop.attach(backing, "tag-a")
    assert device.path == "/dev/loop7"
    assert seen_while_waiting == ["/dev/loop8"]
    assert configured == {"/dev/loop8": "tag-b", "/dev/loop7": "tag-a"}
