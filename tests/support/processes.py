"""Helpers for tests that run driver processes and the CLI against them: wait for a condition,
run `ledger` or `inspect` on a test's state and pool, read one Prometheus metric, pick a free
port, list another mount namespace's mounts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

# A new mount namespace whose mounts don't propagate back: one per node plugin.
UNSHARE = ["unshare", "--mount", "--propagation", "private"]


def mount_points(pid: int) -> list[str]:
    return [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]


def ledger_cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "csi_hostpath",
            "ledger",
            *args,
            "--state-dir",
            str(workdir / "ctrl-state"),
            "--pool-dir",
            str(workdir / "pool"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def inspect(workdir: Path, volume_id: str) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "csi_hostpath",
            "inspect",
            volume_id,
            "--json",
            "--state-dir",
            str(workdir / "ctrl-state"),
            "--pool-dir",
            str(workdir / "pool"),
            "--node-grace",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {p["phase"]: p for p in json.loads(out.stdout)["phases"]}


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in body.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")
