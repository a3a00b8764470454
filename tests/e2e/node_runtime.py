"""What the Kubernetes roles of harness.py run against: each node's mount namespace, and the
driver processes with the client that retries as the sidecars and the kubelet do.

Each node gets a mount namespace of its own that outlives its node plugin, as a real node's host
namespace does: a kill -9 of the plugin leaves the node's mounts in place, and the restarted plugin
joins the same namespace. The pods' reads and writes run inside that namespace through nsenter.

A plugin's calls retry ABORTED (another operation on the volume is in flight) and UNAVAILABLE (the
plugin is down or restarting) with a bounded exponential backoff; a plugin found dead is started
again, as the container runtime would. Any other code is the answer and goes back to the caller.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tests.conftest import Client, DriverProcess
from tests.support.processes import UNSHARE, mount_points
from tests.support.static_dev import static_dev

C = grpc.StatusCode
RETRYABLE = frozenset({C.ABORTED, C.UNAVAILABLE})
# One RPC may run mkfs; a frozen plugin must still not hang a test forever.
RPC_TIMEOUT = 60.0


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff: about 20 s of retries before the role gives up."""

    initial: float = 0.02
    factor: float = 2.0
    ceiling: float = 0.5
    attempts: int = 50


class NodeNamespace:
    """A private mount namespace held open by a sleeping process, standing in for a node's host
    mount namespace: plugins come and go, the namespace and its mounts stay. With static_dev,
    its /dev is a kind node's: a tmpfs with copies of a few device nodes
    (tests/support/static_dev.py)."""

    def __init__(self, name: str, *, static_dev: bool = False) -> None:
        self.name = name
        self.static_dev = static_dev
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            # setpriv sets the parent-death signal in the child itself (it survives the exec of
            # unshare and sleep), so the holder dies with the test process even if that is
            # killed. A Python preexec_fn would run between fork and exec in a process with gRPC
            # threads, which is not safe.
            [
                "setpriv",
                "--pdeathsig",
                "KILL",
                "--",
                *(static_dev() if self.static_dev else UNSHARE),
                "sleep",
                "infinity",
            ],
        )
        # unshare(2) has run once the process has exec'ed sleep; before that, nsenter would
        # join the test's own namespace.
        deadline = time.monotonic() + 10
        while Path(f"/proc/{self.proc.pid}/comm").read_text().strip() != "sleep":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the namespace holder of {self.name} did not start")
            time.sleep(0.005)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside this namespace."""
        return ["nsenter", "-t", str(self.pid), "-m", "--"]

    def run(self, *argv: str, data: bytes | None = None) -> bytes:
        out = subprocess.run(
            [*self.prefix(), *argv], input=data, capture_output=True, timeout=60, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"{argv} in {self.name}'s namespace exited {out.returncode}: "
                f"{out.stderr.decode(errors='replace')}"
            )
        return out.stdout

    def mounts_under(self, root: Path) -> list[str]:
        prefix = str(root).rstrip("/") + "/"
        return [m for m in mount_points(self.pid) if m.startswith(prefix) or m == str(root)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)


class Plugin:
    """A driver process and the client of its current incarnation."""

    def __init__(self, name: str, handle: DriverProcess, client: Client) -> None:
        self.name = name
        self.handle = handle
        self.client = client
        self.restarts = 0
        # Run right after each new incarnation answers, before any retry reaches it.
        self.after_restart: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        assert self.handle.proc is not None
        return self.handle.proc.pid

    def alive(self) -> bool:
        return self.handle.proc is not None and self.handle.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with self._lock:
            self.handle.kill(sig)

    @property
    def state_dir(self) -> Path:
        args = self.handle.args
        return Path(args[args.index("--state-dir") + 1])

    def crash(self, lose: str = "") -> None:
        """kill -9, and with lose set, lose the state directory before anything restarts the
        plugin: "empty" deletes it (a new or mistyped --state-dir, a pod moved to a node whose
        hostPath is empty), "truncated" leaves a zero-byte state.db (a torn disk, a bad
        backup). The pool is untouched: it is the truth the restart rebuilds from."""
        with self._lock:
            self.handle.kill(signal.SIGKILL)
            if lose == "empty":
                shutil.rmtree(self.state_dir, ignore_errors=True)
            elif lose == "truncated":
                (self.state_dir / "state.db").write_bytes(b"")
                for suffix in ("-wal", "-shm"):
                    (self.state_dir / f"state.db{suffix}").unlink(missing_ok=True)
            elif lose:
                raise ValueError(f"unknown state loss {lose!r}")

    def restart(self) -> None:
        """Start a new incarnation; it has reconciled by the time its socket answers."""
        with self._lock:
            self._restart_locked()

    def _restart_locked(self) -> None:
        if self.alive():
            self.handle.kill(signal.SIGKILL)
        self.client.close()
        self.client = self.handle.start()
        self.restarts += 1
        for hook in self.after_restart:
            hook()

    def ensure_running(self) -> bool:
        """What the container runtime does for a crashed plugin: start it again. True if it had
        to."""
        with self._lock:
            if self.alive():
                return False
            self._restart_locked()
            return True

    def call(self, service: str, method: str, request: Any, backoff: Backoff = Backoff()) -> Any:
        delay = backoff.initial
        for attempt in range(backoff.attempts):
            stub = getattr(self.client, service)
            try:
                return getattr(stub, method)(request, timeout=RPC_TIMEOUT)
            except grpc.RpcError as e:
                code = e.code()
                if code not in RETRYABLE or attempt == backoff.attempts - 1:
                    raise
                if code == C.UNAVAILABLE:
                    self.ensure_running()
            time.sleep(delay)
            delay = min(delay * backoff.factor, backoff.ceiling)
        raise AssertionError("unreachable: the last attempt raises or returns")

    def log(self) -> str:
        return self.handle.log()
