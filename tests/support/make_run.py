"""`make run` and the other Makefile targets as a person runs them: the repository's own Makefile,
with RUN_DIR pointed at a test's directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.support.volume_cli_runner import Cli

REPO = Path(__file__).resolve().parents[2]
STOP_TIMEOUT = 60.0


@contextmanager
def sigint_not_ignored() -> Iterator[None]:
    """Children started inside get SIGINT's default action, as from a terminal. A shell without
    job control starts a background command with SIGINT ignored, and an ignored signal stays
    ignored through fork and exec, down to make and the driver; a handler of Python's own is
    reset to the default by exec."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class MakeRun:
    """`make run RUN_DIR=...` in its own session (so no signal of the test's reaches it)."""

    run_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self, timeout: float = 120.0) -> MakeRun:
        socket = self.run_dir / "csi.sock"
        socket.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log, sigint_not_ignored():
            self.proc = subprocess.Popen(
                ["make", "-s", "-C", str(REPO), "run", f"RUN_DIR={self.run_dir}", "NODE_ID=node-a"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"make run did not serve:\n{self.log()}")
            time.sleep(0.05)
        channel = grpc.insecure_channel(f"unix://{socket}")
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        finally:
            channel.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        """Send sig to make's own PID; make and the driver must be gone within STOP_TIMEOUT.
        The log written since start."""
        assert self.proc is not None
        before = len(self.log())
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"make run did not stop on signal {sig}:\n{self.log()}") from None
        return self.log()[before:]

    def kill(self) -> None:
        """The last resort of a teardown: the session this helper started, and nothing else."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def checkout_copy(root: Path) -> Path:
    """The Makefile, its fragments, the tools and the package (a link) in a directory of their
    own, with a venv and caches of its own: targets that remove those (clean) run there, never
    in the repository the tests run from."""
    copy = root / "checkout"
    copy.mkdir()
    shutil.copy(REPO / "Makefile", copy / "Makefile")
    shutil.copytree(REPO / "mk", copy / "mk")
    shutil.copytree(REPO / "tools", copy / "tools")
    (copy / "csi_hostpath").symlink_to(REPO / "csi_hostpath")
    for made in (".venv/bin", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"):
        (copy / made).mkdir(parents=True)
    return copy


def make_in(copy: Path, target: str, *variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-s", "-C", str(copy), target, *variables],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )


@contextmanager
def make_run_session(
    run_dir: Path, cwd: Path, log: Path, *, run_dir_env: bool
) -> Iterator[tuple[Cli, MakeRun]]:
    """A shell in cwd beside `make run RUN_DIR=run_dir` (not started yet): no variable says where
    the driver is, unless run_dir_env sets $CSI_HOSTPATH_RUN_DIR. make is stopped afterwards."""
    drop = ("CSI_HOSTPATH_ENDPOINT", "CSI_HOSTPATH_RUN_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if run_dir_env:
        env["CSI_HOSTPATH_RUN_DIR"] = str(run_dir)
    env["PYTHONPATH"] = str(REPO)
    runner = MakeRun(run_dir, log)
    try:
        yield Cli(cwd, env), runner
    finally:
        runner.kill()
