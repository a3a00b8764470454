"""Real `csi-hostpath registrar` and `csi-hostpath livenessprobe` processes for the tests, and a
plain HTTP GET of their /healthz."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

WAIT = 30.0  # seconds a condition may take on a loaded machine before the test gives up


def wait_until(what: str, condition: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


@dataclass
class Sidecar:
    """One sidecar subcommand as a child process, its output in a log file."""

    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _port: int | None = field(default=None, init=False)

    def start(self) -> Sidecar:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "csi_hostpath", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def port(self) -> int:
        """The /healthz port it logged (the tests ask for port 0: any free one)."""
        if self._port is None:
            found: list[str] = []

            def logged() -> bool:
                found[:] = re.findall(r"serving GET /healthz on port (\d+)", self.log())
                return bool(found) or not self.running()

            wait_until("the /healthz port in the log", logged)
            assert found, f"no /healthz port logged:\n{self.log()}"
            self._port = int(found[0])
        return self._port

    def healthz(self) -> tuple[int, str]:
        return get(f"http://127.0.0.1:{self.port}/healthz")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, timeout: float = WAIT) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)


def get(url: str, timeout: float = WAIT) -> tuple[int, str]:
    """(status, body) of a GET; an error status is an answer too, not an exception."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
