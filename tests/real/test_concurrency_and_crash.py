"""Concurrency ("Operation pending for volume" → ABORTED) and crash recovery, on real devices."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath.system.base import Fs, Pool, System
from csi_hostpath.system.linux import linux_system
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, released_after_teardown

C = grpc.StatusCode


@dataclass
class Gate:
    """Holds one system call until the test releases it, so a second RPC surely overlaps."""

    entered: threading.Event
    release: threading.Event


class GatedFs:
    def __init__(self, inner: Fs, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate

    def mkfs(self, device: str, fs_type: str) -> None:
        self._gate.entered.set()
        assert self._gate.release.wait(30)
        self._inner.mkfs(device, fs_type)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GatedPool:
    def __init__(self, inner: Pool, gate: Gate) -> None:
        self._inner = inner
        self._gate = gate

    def create(self, path: Path, size_bytes: int) -> None:
        self._gate.entered.set()
        assert self._gate.release.wait(30)
        self._inner.create(path, size_bytes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def gated(workdir: Path) -> Iterator[tuple[Client, Gate]]:
    gate = Gate(threading.Event(), threading.Event())

    def gated_system(pool_dir: Path) -> System:
        real = linux_system(pool_dir)
        return System(
            GatedPool(real.pool, gate),
            real.loop,
            GatedFs(real.fs, gate),
            real.mounts,
            real.devices,
            real.io,
        )

    with in_process(workdir, "gated", system=gated_system) as client:
        try:
            yield client, gate
        finally:
            gate.release.set()  # before the server stops, so no call is left waiting


def _in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(fn(*args))
        except Exception as e:
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, outcome


def test_second_call_on_same_volume_is_aborted(gated: tuple[Client, Gate], workdir: Path) -> None:
    """spec.md "Concurrency": a second call for a volume with an operation pending → ABORTED."""
    client, gate = gated
    cap = h.mount_cap("ext4")
    # CreateVolume: the first call holds the name while the backing file is being made.
    t, outcome = _in_thread(h.create, client, "contended", cap, 32 * h.MiB)
    assert gate.entered.wait(10)
    h.expect_code(C.ABORTED, h.create, client, "contended", cap, 32 * h.MiB)
    gate.release.set()
    t.join(20)
    vol = outcome[0]
    assert vol.volume_id, outcome

    # NodeStageVolume: the first call holds the volume while mkfs runs.
    gate.entered.clear()
    gate.release.clear()
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging = workdir / "st"
    staging.mkdir()
    t, outcome = _in_thread(h.stage, client, vol, staging, cap, ctx)
    assert gate.entered.wait(10)
    err = h.expect_code(C.ABORTED, h.stage, client, vol, staging, cap, ctx)
    assert "NodeStageVolume" in (err.details() or "")
    h.expect_code(C.ABORTED, h.unstage, client, vol.volume_id, staging)
    gate.release.set()
    t.join(20)
    assert outcome == [None]
    assert h.mounted(staging)
    h.unstage(client, vol.volume_id, staging)


def test_kill_9_between_stage_and_publish_then_publish_works(spawn: Any, workdir: Path) -> None:
    """A crash must heal: kill -9 after NodeStage, restart, and NodePublish finds the staged
    volume (reconcile reads mountinfo and the loop devices)."""
    handle, client = spawn("crash")
    cap = h.mount_cap("ext4")
    vol = h.create(client, "crashy", cap, 32 * h.MiB)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging, target = workdir / "st", workdir / "tg"
    staging.mkdir()
    h.stage(client, vol, staging, cap, ctx)
    (staging / "before-crash").write_text("kept")
    client.close()
    handle.kill(signal.SIGKILL)

    client = handle.start()
    try:
        h.node_publish(client, vol.volume_id, staging, target, cap)
        assert (target / "before-crash").read_text() == "kept"
        # "serving" is logged just after the server starts answering: wait for the line.
        deadline = time.monotonic() + 60
        while handle.log().count(" serving ") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        after_first_start = handle.log().split(" serving ", 1)[1]
        assert " serving " in after_first_start, "the driver was restarted"
        assert "repair" not in after_first_start, "the kernel state was intact: nothing to repair"
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
        assert not released_after_teardown(workdir, target, staging)
    finally:
        client.close()


def test_restart_after_reboot_restores_staging_and_targets(spawn: Any, workdir: Path) -> None:
    """What a node reboot does: every mount and loop device vanishes behind the driver's back.
    On restart the store says what should be, and reconcile rebuilds it."""
    handle, client = spawn("reboot")
    cap = h.mount_cap("ext4")
    vol = h.create(client, "rebooted", cap, 32 * h.MiB)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging, target = workdir / "st", workdir / "tg"
    staging.mkdir()
    h.stage(client, vol, staging, cap, ctx)
    h.node_publish(client, vol.volume_id, staging, target, cap)
    (target / "f").write_text("survives")
    subprocess.run(["sync"], check=True)
    client.close()
    handle.kill(signal.SIGKILL)
    for path in (target, staging):
        subprocess.run(["umount", str(path)], check=True)
    for dev in loops_backed_under(workdir):
        subprocess.run(["losetup", "-d", dev], check=True)
    assert not h.mounted(staging)

    client = handle.start()
    try:
        assert h.mounted(staging) and h.mounted(target)
        assert (target / "f").read_text() == "survives"
        log = handle.log()
        # Re-attached too, unless udev still held the old device open when it was detached, in
        # which case the kernel kept it configured until then and reconcile reused it.
        assert "repair: re-mounted" in log and "repair: re-binding" in log
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
    finally:
        client.close()


def test_start_sweeps_what_a_crash_left_mid_copy_or_mid_create(spawn: Any, workdir: Path) -> None:
    """A kill -9 during a clone, restore or snapshot leaves a *.tmp copy in the pool, and one
    during an inline volume's creation leaves a file no record claims: the restart removes them.
    A backing file with neither record, identity nor intent is not a crash leftover: it is
    quarantined, never deleted (the pool is the truth)."""
    state = workdir / "sweep-state"
    leftovers = [
        state / "pool" / "volumes" / f"vol-{'a' * 32}.img.tmp",
        state / "pool" / "snapshots" / f"snap-{'b' * 32}.img.tmp",
        state / "ephemeral" / f"vol-{'d' * 32}.img",
    ]
    unknown = state / "pool" / "volumes" / f"vol-{'c' * 32}.img"
    for path in [*leftovers, unknown]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    handle, client = spawn("sweep")
    assert client is not None
    assert [p for p in [*leftovers, unknown] if p.exists()] == []
    assert handle.log().count("repair: removing") == len(leftovers)
    kept = state / "pool" / "quarantine" / unknown.name
    assert kept.read_bytes() == b"partial"
    assert (kept.parent / (kept.name + ".why.json")).exists()
