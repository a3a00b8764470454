"""Reconcile repairs item by item: a failed step is retried, and the plugin still serves.

Reconcile repairs item by item. A step that fails at start is logged with its
reason, the plugin starts and serves, and the agent retries the step until it succeeds."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.system.base import LoopDevice, System
from csi_hostpath.system.fake import fake_system
from tests.conftest import in_process


class FlakyLoop:
    """Listing loop devices fails the first `failures` times, as a busy or odd kernel might."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        if self.failures > 0:
            self.failures -= 1
            raise OSError(16, "Device or resource busy", "/sys/block")
        result: list[LoopDevice] = self.inner.list(tag_prefix)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_failing_reconcile_item_is_logged_retried_and_never_stops_the_plugin(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def flaky(pool_dir: Path) -> System:
        base = fake_system(pool_dir)
        loop = FlakyLoop(base.loop, failures=2)
        return System(base.pool, loop, base.fs, base.mounts, base.devices, base.io)

    caplog.set_level(logging.INFO, logger="csi_hostpath")
    with in_process(workdir, "flaky", "--fence-interval", "0.1", system=flaky) as client:
        info = client.node.NodeGetInfo(pb.NodeGetInfoRequest())
        assert info.node_id == "node-a", "the plugin serves although reconcile hit a failure"
        deadline = time.monotonic() + 10
        while "succeeded on retry" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    text = caplog.text
    assert "repair: unclaimed devices failed: OSError" in text
    assert "Device or resource busy" in text, "the log names the reason"
    assert "repair: unclaimed devices failed again" in text
    assert "repair: unclaimed devices succeeded on retry" in text
