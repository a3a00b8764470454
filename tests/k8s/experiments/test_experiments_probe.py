"""A node's own writer (Probe) is gone from its node once stopped, not only its docker exec."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.k8s.experiments.exp_nodes import Probe


class DetachedNodes:
    """Like `docker exec`: the process started in the node is no child of the client, so
    killing the client's process group leaves it running."""

    def spawn(self, node: str, argv: Sequence[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["sh", "-c", 'setsid "$@" & wait', "client", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def exec(self, node: str, argv: Sequence[str], timeout: float = 120) -> str:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout)
        return done.stdout


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], check=False, capture_output=True).returncode == 0


def test_stop_kills_the_writer_in_its_node(tmp_path: Path) -> None:
    ctx: Any = SimpleNamespace(nodes=DetachedNodes())
    probe = Probe(ctx, "node-a", str(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while not probe.lines and time.monotonic() < deadline:
            time.sleep(0.1)
        assert probe.lines and probe.lines[0] == "ok 1"
        assert running(probe.marker)
        probe.stop()
        deadline = time.monotonic() + 5
        while running(probe.marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not running(probe.marker), "the writer outlived its stop"
    finally:
        subprocess.run(["pkill", "-9", "-f", probe.marker], check=False)
