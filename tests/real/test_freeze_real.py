"""A freeze is always thawed, on real devices: restarts, lost state, foreign freezes, the watchdog.

A freeze is always thawed, on real devices: a node plugin killed -9 while a snapshot holds a
volume's filesystem frozen thaws it when it restarts, also on an empty or truncated state
directory (the freeze record lives in the pool, beside the node's heartbeat, so it survives what
the state directory does not: kept there, it went with the state and the restarted plugin left
the filesystem frozen, its pod's writes hung in D state); a filesystem frozen by someone else is
thawed and snapshotted; the watchdog thaws and aborts a copy that overruns; stats say abnormal
while frozen. The controller-to-node freeze of the chart's split shape:
tests/real/test_freeze_remote.py. The bookkeeping on the fake kernel: tests/unit/test_freeze.py.

Every test thaws the volume's filesystem in its `finally` with `fsfreeze -u`, so a failing test
never leaves the shared kernel with a frozen filesystem, and every write into a filesystem that
may be frozen runs in a child process waited on with a timeout, so a hang can't wedge pytest.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.service.node.freeze import TEST_HOLD_ENV
from csi_hostpath.system.base import System
from csi_hostpath.system.linux import linux_system
from tests.conftest import Client, in_process
from tests.support import helpers as h

C = grpc.StatusCode


def snapshot(client: Any, volume_id: str, name: str, timeout: float = 60) -> pb.Snapshot:
    reply: pb.CreateSnapshotResponse = client.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=volume_id, name=name), timeout=timeout
    )
    return reply.snapshot


def writes_within(directory: Path, seconds: float) -> bool:
    """Does a write (with fsync) into directory finish within `seconds`? A frozen filesystem
    holds the writer in D state; it is left to finish after the test's thaw."""
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT, 0o644); "
         "os.write(fd, b'after'); os.fsync(fd)", str(directory / "probe")],
    )  # fmt: skip
    try:
        return writer.wait(timeout=seconds) == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        if writer.poll() is None:
            _WAITING.append(writer)


_WAITING: list[subprocess.Popen[bytes]] = []


@contextmanager
def always_thawed(mount_point: Path) -> Iterator[None]:
    try:
        yield
    finally:
        subprocess.run(["fsfreeze", "-u", str(mount_point)], capture_output=True, check=False)
        while _WAITING:
            writer = _WAITING.pop()
            writer.kill()
            writer.wait(timeout=30)


def _staged(client: Any, workdir: Path, name: str) -> tuple[pb.Volume, Path]:
    cap = h.mount_cap("ext4")
    vol = h.create(client, name, cap, 32 * h.MiB)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging = workdir / f"{name}-staging"
    staging.mkdir()
    h.stage(client, vol, staging, cap, ctx)
    h.write_pattern(staging / "data", 1 * h.MiB)
    return vol, staging


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def kill_9_while_frozen(handle: Any, client: Client, volume_id: str, staging: Path) -> None:
    """Kill -9 the plugin while a snapshot holds the volume's filesystem frozen (the plugin was
    started with TEST_HOLD_ENV set); the caller thaws it in `always_thawed` if the test fails."""

    def call() -> None:
        with pytest.raises(grpc.RpcError):  # the kill ends the call
            snapshot(client, volume_id, "snap")

    caller = threading.Thread(target=call)
    caller.start()
    _wait_for(lambda: "holding" in handle.log(), 30, "the freeze")
    assert not writes_within(staging, 1), "the filesystem is frozen by the snapshot"
    handle.kill(signal.SIGKILL)
    caller.join(30)
    client.close()


def restart_thaws_then_snapshot_succeeds(
    handle: Any, volume_id: str, staging: Path, left_frozen: str
) -> None:
    """Restart the killed plugin: the start alone thaws the filesystem, promptly, and a retried
    snapshot then succeeds and thaws what it froze. left_frozen is the failure's message."""
    started = time.monotonic()
    client = handle.start()
    try:
        assert writes_within(staging, 5), left_frozen
        assert time.monotonic() - started < 30
        assert "thawed" in handle.log()
        snap = snapshot(client, volume_id, "snap")
        assert snap.ready_to_use
        assert writes_within(staging, 5), "the retried snapshot thawed what it froze"
    finally:
        client.close()


def test_kill_9_while_frozen_restart_thaws_and_snapshot_retry_succeeds(
    spawn: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_HOLD_ENV, "600")  # the first incarnation holds its freeze
    handle, client = spawn("frz")
    monkeypatch.delenv(TEST_HOLD_ENV)  # later incarnations don't
    vol, staging = _staged(client, workdir, "frz")
    with always_thawed(staging):
        kill_9_while_frozen(handle, client, vol.volume_id, staging)
        restart_thaws_then_snapshot_succeeds(
            handle, vol.volume_id, staging, "the restart left the filesystem frozen"
        )


def test_snapshot_of_an_externally_frozen_filesystem_thaws_and_succeeds(
    driver: Client, workdir: Path
) -> None:
    """FIFREEZE's EBUSY means "already frozen": thaw, freeze again, copy, thaw."""
    vol, staging = _staged(driver, workdir, "ebusy")
    with always_thawed(staging):
        subprocess.run(["fsfreeze", "-f", str(staging)], check=True)
        snap = snapshot(driver, vol.volume_id, "snap")
        assert snap.ready_to_use
        assert writes_within(staging, 5), "the snapshot left the filesystem frozen"


class HeldCopy:
    """Holds copy_sparse until released, so the test can look at a frozen volume."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def copy_sparse(self, source: Path, dest: Path) -> None:
        self.entered.set()
        self.release.wait(30)
        self.inner.copy_sparse(source, dest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def held_driver(workdir: Path, *extra: str) -> Iterator[tuple[Client, HeldCopy]]:
    pools: list[HeldCopy] = []

    def held(pool_dir: Path) -> System:
        real = linux_system(pool_dir)
        pools.append(HeldCopy(real.pool))
        return dataclasses.replace(real, pool=pools[0])

    with in_process(workdir, "held", *extra, system=held) as client:
        try:
            yield client, pools[0]
        finally:
            pools[0].release.set()


def test_volume_stats_abnormal_while_frozen(workdir: Path) -> None:
    with held_driver(workdir) as (client, pool):
        vol, staging = _staged(client, workdir, "stats")
        with always_thawed(staging):
            outcome: list[Any] = []
            caller = threading.Thread(
                target=lambda: outcome.append(snapshot(client, vol.volume_id, "s"))
            )
            caller.start()
            assert pool.entered.wait(20)
            request = pb.NodeGetVolumeStatsRequest(
                volume_id=vol.volume_id, volume_path=str(staging)
            )
            condition = client.node.NodeGetVolumeStats(request).volume_condition
            assert condition.abnormal and "frozen" in condition.message, condition
            pool.release.set()
            caller.join(30)
            assert outcome and outcome[0].ready_to_use
            assert not client.node.NodeGetVolumeStats(request).volume_condition.abnormal


def test_freeze_watchdog_thaws_and_the_snapshot_is_aborted(workdir: Path) -> None:
    with held_driver(workdir, "--max-freeze-seconds", "1") as (client, pool):
        vol, staging = _staged(client, workdir, "dog")
        with always_thawed(staging):
            outcome: list[Any] = []

            def call() -> None:
                try:
                    outcome.append(snapshot(client, vol.volume_id, "s"))
                except grpc.RpcError as e:
                    outcome.append(e)

            caller = threading.Thread(target=call)
            caller.start()
            assert pool.entered.wait(20)
            time.sleep(1.5)
            assert writes_within(staging, 5), "the watchdog thawed the filesystem"
            pool.release.set()
            caller.join(30)
            assert isinstance(outcome[0], grpc.RpcError), outcome
            assert outcome[0].code() == C.ABORTED, outcome[0].details()
            snapshots = client.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries
            assert not snapshots
            assert not list((workdir / "held-state" / "pool" / "snapshots").glob("*.img"))


@pytest.mark.parametrize("loss", ["empty", "truncated"])
def test_kill_9_while_frozen_then_empty_state_still_thaws(
    spawn: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch, loss: str
) -> None:
    pool = ["--pool-dir", str(workdir / "pool")]  # apart from the state: the pool stays
    monkeypatch.setenv(TEST_HOLD_ENV, "600")  # the first incarnation holds its freeze
    handle, client = spawn("frz", *pool)
    monkeypatch.delenv(TEST_HOLD_ENV)
    vol, staging = _staged(client, workdir, "frz")
    with always_thawed(staging):
        kill_9_while_frozen(handle, client, vol.volume_id, staging)
        state = workdir / "frz-state"
        if loss == "empty":
            shutil.rmtree(state)
        else:
            (state / "state.db").write_bytes(b"")
            for suffix in ("-wal", "-shm"):
                (state / f"state.db{suffix}").unlink(missing_ok=True)

        # No snapshot retry first: the start alone must thaw it.
        restart_thaws_then_snapshot_succeeds(
            handle, vol.volume_id, staging, "the restart on lost state left it frozen"
        )
