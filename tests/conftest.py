from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import helpers
from tests.support.kernel import cleanup_kernel, sweep_deferred


def pytest_sessionfinish(session: pytest.Session) -> None:
    sweep_deferred()  # the loop-device check of the tests not marked real, once for all


TESTS = Path(__file__).resolve().parent
# The folders whose tests run on real loop devices, mounts and filesystems (root). Each test in
# them is marked `real` here, once, so `make unit` (-m 'not real') leaves them out and the workdir
# fixture gives them the thorough kernel cleanup; a test that needs neither root nor a device
# belongs in tests/unit. The one exception is a two-layer test's fake half: a fixture
# parametrized with LAYERS runs each test on the fake system layer too, and that half, in this
# process and without root, stays in `make unit`.
REAL_FOLDERS = tuple(TESTS / name for name in ("real", "e2e", "system", "conformance"))
FAKE = "fake"
LAYERS = (FAKE, "real")


def _fake_half(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and FAKE in callspec.params.values()


# Before the mark plugin's own hook: `-m real` / `-m 'not real'` select on this mark.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.path.is_relative_to(folder) for folder in REAL_FOLDERS) and not _fake_half(
            item
        ):
            item.add_marker(pytest.mark.real)


def scratch_parent(real: bool) -> str | None:
    """Where a test's scratch directory goes: /tmp (the default) for a test on real devices;
    tmpfs for the others, where the store's fsync costs nothing (a fake-layer driver's
    tests ran three times faster there on a busy shared disk)."""
    if real or not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK)):
        return None
    return "/dev/shm"


@pytest.fixture
def workdir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A scratch directory whose mounts and loop devices are torn down afterwards, whatever
    happened in the test (a test not marked real gets the cheap check first, on tmpfs)."""
    real = request.node.get_closest_marker("real") is not None
    root = Path(tempfile.mkdtemp(prefix="csihp-test-", dir=scratch_parent(real)))
    try:
        yield root
    finally:
        cleanup_kernel(root, thorough=real)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Client:
    """Stubs on one channel to a driver's socket."""

    socket: Path
    channel: grpc.Channel = field(init=False)
    identity: Any = field(init=False)
    controller: Any = field(init=False)
    node: Any = field(init=False)
    controller_group: Any = field(init=False)
    # The FakeKernel behind the driver when it runs on the fake system layer, None on the real
    # one: tests that look at the kernel (is this path mounted?) ask the layer that serves them.
    kernel: Any = None

    @property
    def on_fake(self) -> bool:
        return self.kernel is not None

    def mounted(self, path: Path) -> bool:
        """Is something mounted at path, on the layer this driver runs on?"""
        if self.kernel is None:
            return helpers.mounted(path)
        return any(m.entry.mount_point == os.path.realpath(path) for m in self.kernel.mounts)

    def __post_init__(self) -> None:
        from csi_hostpath._pb import csi_pb2_grpc as pb_grpc

        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        self.identity = pb_grpc.IdentityStub(self.channel)
        self.controller = pb_grpc.ControllerStub(self.channel)
        self.node = pb_grpc.NodeStub(self.channel)
        self.controller_group = pb_grpc.GroupControllerStub(self.channel)

    def close(self) -> None:
        self.channel.close()


@dataclass
class DriverProcess:
    """A real `csi-hostpath serve` process."""

    args: list[str]
    socket: Path
    log_path: Path
    prefix: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> Client:
        if self.socket.exists():
            self.socket.unlink()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "csi_hostpath", "serve", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"driver exited {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"driver did not create its socket:\n{self.log()}")
            time.sleep(0.02)
        client = Client(self.socket)
        grpc.channel_ready_future(client.channel).result(timeout=timeout)
        return client

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(timeout=20)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)


def driver_args(root: Path, name: str, *extra: str, node_id: str = "node-a") -> list[str]:
    return [
        "--endpoint",
        f"unix://{root}/{name}.sock",
        "--node-id",
        node_id,
        "--state-dir",
        str(root / f"{name}-state"),
        "--log-level",
        "DEBUG",
        *extra,
    ]


@pytest.fixture
def spawn(workdir: Path) -> Iterator[Any]:
    """Start driver processes; all are stopped (and the kernel cleaned) when the test ends."""
    started: list[tuple[DriverProcess, Client | None]] = []

    def _spawn(
        name: str,
        *extra: str,
        node_id: str = "node-a",
        prefix: list[str] | None = None,
        start: bool = True,
    ) -> tuple[DriverProcess, Client | None]:
        handle = DriverProcess(
            driver_args(workdir, name, *extra, node_id=node_id),
            workdir / f"{name}.sock",
            workdir / f"{name}.log",
            prefix=prefix or [],
        )
        client = handle.start() if start else None
        started.append((handle, client))
        return handle, client

    yield _spawn
    for handle, client in started:
        if client is not None:
            client.close()
        handle.stop()


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The CLI's parser, built once: building it is a third of an in-process driver's start."""
    from csi_hostpath.cli import build_parser

    return build_parser()


@contextmanager
def in_process(
    workdir: Path,
    name: str,
    *extra: str,
    system: Callable[[Path], Any] | None = None,
    kernel: Any = None,
) -> Iterator[Client]:
    """A driver served from this process on a temporary unix socket: `serve` arguments as the
    CLI parses them, and optionally another system layer, built from the pool directory."""
    from csi_hostpath.cli import config_from_args
    from csi_hostpath.daemon.server import build_driver, start

    config = config_from_args(_parser().parse_args(["serve", *driver_args(workdir, name), *extra]))
    drv = build_driver(config, system=system(config.pool_dir) if system else None)
    start(drv)
    client = Client(config.socket_path, kernel=kernel)
    try:
        yield client
    finally:
        client.close()
        drv.stop(grace=1)


@contextmanager
def on_small_pool(workdir: Path, name: str, size_mib: int) -> Iterator[tuple[Client, Path]]:
    """An in-process driver (shared scope, real system layer) whose pool is a tmpfs of size_mib,
    so that running out of room is real without filling the host's disk; the client and the pool.
    The workdir's cleanup unmounts the tmpfs."""
    pool = workdir / f"{name}-pool"
    pool.mkdir()
    size = f"size={size_mib}m"
    subprocess.run(["mount", "-t", "tmpfs", "-o", size, f"csihp-{name}", str(pool)], check=True)
    with in_process(workdir, name, "--pool-dir", str(pool), "--pool-scope", "shared") as client:
        yield client, pool


@pytest.fixture
def driver(workdir: Path) -> Iterator[Client]:
    """An in-process driver (mode all, local scope) on the real system layer."""
    with in_process(workdir, "drv") as client:
        yield client


@pytest.fixture
def fake_driver(workdir: Path) -> Iterator[Client]:
    """A real gRPC server over the fake system layer, with a 64 MiB pool: fast, needs no root,
    and can run out of space on purpose."""
    from csi_hostpath.system.fake import fake_system

    with in_process(
        workdir, "f", system=lambda pool: fake_system(pool, capacity_bytes=64 << 20)
    ) as client:
        yield client


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real)])
def layered_driver(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Client]:
    """The same in-process driver (mode all, local scope, pool of the default size) on each
    system layer in turn: the fake one (no root, runs in `make unit`) and the real one (loop
    devices and mounts, marked real). A table of RPC rules written against this fixture runs
    on both; a check that needs the real kernel asks `client.on_fake` and skips there."""
    if request.param == "real":
        with in_process(workdir, "drv") as client:
            yield client
        return
    from csi_hostpath.system.fake import FakeKernel, fake_system

    kernel = FakeKernel()
    with in_process(
        workdir, "drv", system=lambda pool: fake_system(pool, kernel=kernel), kernel=kernel
    ) as client:
        yield client


@pytest.fixture
def cli(spawn: Any, workdir: Path) -> Iterator[Any]:
    """`csi-hostpath volume` as a shell session runs it (tests/support/volume_cli_runner.py),
    against a real driver process found through $CSI_HOSTPATH_ENDPOINT, records in WORKDIR/run."""
    from tests.support.volume_cli_runner import Cli

    spawn("drv")
    root = workdir / "session"
    root.mkdir()
    env = dict(os.environ)
    env["CSI_HOSTPATH_ENDPOINT"] = f"unix://{workdir}/drv.sock"
    env["CSI_HOSTPATH_RUN_DIR"] = str(workdir / "run")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    yield Cli(root, env)
