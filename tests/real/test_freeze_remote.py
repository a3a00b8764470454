"""The controller asks the node to freeze a volume around its copy, on real devices.

Snapshot consistency in the chart's own shape, on real devices: a controller-only process and a
node-only process (in its own mount namespace) share a pool; the controller asks the node, through
the pool, to freeze the volume around its copy (service/controller/remote_freeze.py,
service/node/freeze_server.py).

A writer appends fsync'd, numbered records into the node's mount while the controller cuts a
snapshot. The cut must be a frozen filesystem: ext4 clears needs_recovery when it freezes, so the
copy fscks clean without a journal replay, and its file holds a whole prefix of the records. The
kill -9 of the controller mid-freeze must leave the node's filesystem thawed within the silence
window, long before any timeout.

Every write into a filesystem that may be frozen runs in a child process, and each test thaws the
node's mount in its `finally` (inside the node's namespace), so a failure can't wedge the kernel.
"""

from __future__ import annotations

import json
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
from csi_hostpath.core.naming import node_key
from csi_hostpath.service.controller.remote_freeze import TEST_HOLD_ENV
from tests.support import helpers as h

UNSHARE = ["unshare", "--mount", "--propagation", "private"]
RECORD = 64

WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
i = 0
while True:
    os.write(fd, (b"%08d" % i).ljust(63, b".") + b"\\n")
    os.fsync(fd)
    i += 1
"""


def nsenter(pid: int, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "--", *argv],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def size_in(pid: int, path: Path) -> int:
    """The file's size as the node's namespace sees it (0 until the writer has made it)."""
    out = nsenter(pid, "stat", "-c", "%s", str(path), timeout=20)
    if out.returncode != 0 and "No such file" in out.stderr:
        return 0
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def wait_for(predicate: Any, seconds: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"timed out after {seconds:g}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


@contextmanager
def writer_in(pid: int, mount: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The ordered writer, inside the node's namespace; thawed and stopped whatever happens."""
    proc = subprocess.Popen(
        ["nsenter", "-t", str(pid), "-m", "--", sys.executable, "-c", WRITER, str(mount / "log")]
    )
    try:
        yield proc
    finally:
        nsenter(pid, "fsfreeze", "-u", str(mount), timeout=20)
        proc.kill()
        proc.wait(timeout=30)


def answered_frozen(workdir: Path, volume_id: str) -> bool:
    """The node's answer says "frozen": written after FIFREEZE (its record comes before)."""
    answer = workdir / "pool" / "freeze-requests" / node_key("node-a") / f"{volume_id}.answer.json"
    try:
        return bool(json.loads(answer.read_bytes()).get("state") == "frozen")
    except (OSError, ValueError):
        return False


def check_cut(workdir: Path, image: Path) -> int:
    """The snapshot is a frozen filesystem holding a whole prefix of the records; their count."""
    header = subprocess.run(
        ["dumpe2fs", "-h", str(image)], capture_output=True, text=True, check=True
    )
    features = next(x for x in header.stdout.splitlines() if x.startswith("Filesystem features"))
    assert "needs_recovery" not in features, (
        "the snapshot was cut from a live (unfrozen) ext4: its journal needs recovery"
    )
    fsck = subprocess.run(
        ["e2fsck", "-fn", str(image)], capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    view = workdir / "cut"
    view.mkdir(exist_ok=True)
    subprocess.run(["mount", "-o", "ro,loop", str(image), str(view)], check=True)
    try:
        data = (view / "log").read_bytes()
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert data and len(data) % RECORD == 0, f"a torn record at the end ({len(data)} bytes)"
    for i in range(len(data) // RECORD):
        assert data[i * RECORD : i * RECORD + 8] == b"%08d" % i, f"record {i} is not in order"
    return len(data) // RECORD


def test_controller_freezes_the_node_around_its_copy_and_a_dead_controller_thaws(
    spawn: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = str(workdir / "pool")
    shared = ["--pool-scope", "shared", "--pool-dir", pool, "--heartbeat-interval", "0.3"]
    ctrl_proc, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    # A long node watchdog: the thaw after the controller's kill must come from its silence.
    node_proc, node = spawn(
        "node", "--mode", "node", *shared, "--max-freeze-seconds", "300",
        node_id="node-a", prefix=UNSHARE,
    )  # fmt: skip
    assert node_proc.proc is not None
    pid = node_proc.proc.pid

    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "frozen-remotely", cap, 64 * h.MiB)
    vid = vol.volume_id
    ctx = h.publish(ctrl, vid, "node-a", cap)
    staging = workdir / "node" / "globalmount"
    staging.mkdir(parents=True)
    h.stage(node, vol, staging, cap, ctx)
    frozen_record = workdir / "pool" / "frozen" / node_key("node-a") / f"{vid}.json"

    with writer_in(pid, staging):
        wait_for(lambda: size_in(pid, staging / "log") > 100 * RECORD, 30, "the writer")

        # 1. The cut is consistent: the node froze its filesystem for the copy.
        snap = ctrl.controller.CreateSnapshot(
            pb.CreateSnapshotRequest(source_volume_id=vid, name="cut-1"), timeout=120
        ).snapshot
        assert snap.ready_to_use
        records = check_cut(workdir, workdir / "pool" / "snapshots" / f"{snap.snapshot_id}.img")
        assert records > 100
        assert "froze" in node_proc.log() and "froze" in ctrl_proc.log()
        # The node thaws as soon as it sees the request withdrawn (it polls every 0.1 s).
        wait_for(lambda: not frozen_record.exists(), 10, "the node to thaw after the copy")
        grown = size_in(pid, staging / "log")
        wait_for(lambda: size_in(pid, staging / "log") > grown, 10, "writes after the thaw")

        # 2. kill -9 of the controller mid-freeze: the node thaws by itself.
        assert ctrl is not None
        ctrl.close()
        ctrl_proc.kill(signal.SIGKILL)
        monkeypatch.setenv(TEST_HOLD_ENV, "600")
        ctrl = ctrl_proc.start()
        monkeypatch.delenv(TEST_HOLD_ENV)
        failed: list[BaseException] = []

        def cut() -> None:
            try:
                ctrl.controller.CreateSnapshot(
                    pb.CreateSnapshotRequest(source_volume_id=vid, name="cut-2"), timeout=600
                )
            except grpc.RpcError as e:
                failed.append(e)

        caller = threading.Thread(target=cut)
        caller.start()
        wait_for(lambda: answered_frozen(workdir, vid), 30, "the node's freeze")
        assert frozen_record.exists()
        held = size_in(pid, staging / "log")
        time.sleep(1.0)
        assert size_in(pid, staging / "log") == held, "the writer is held by the freeze"
        ctrl_proc.kill(signal.SIGKILL)
        caller.join(30)
        assert failed, "the kill ends the call"
        thawed_in = wait_for(
            lambda: size_in(pid, staging / "log") > held, 30, "the node to thaw by itself"
        )
        assert thawed_in < 20, thawed_in  # the silence window (5s), far below the 300s watchdog
        assert not frozen_record.exists()
        assert "stopped renewing" in node_proc.log()

        # 3. A new controller withdraws the dead one's request, and its cut is consistent again.
        ctrl.close()
        ctrl = ctrl_proc.start()
        snap = ctrl.controller.CreateSnapshot(
            pb.CreateSnapshotRequest(source_volume_id=vid, name="cut-3"), timeout=120
        ).snapshot
        assert check_cut(workdir, workdir / "pool" / "snapshots" / f"{snap.snapshot_id}.img")
    ctrl.close()


def test_a_node_killed_mid_freeze_keeps_the_cut_whole_and_its_restart_thaws(
    spawn: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the node while the controller copies: the kernel keeps the filesystem frozen
    (the copy stays whole) until the plugin restarts; the restart marks the freeze broken before
    it thaws, so the controller refuses that copy (ABORTED) and the retry cuts a consistent one."""
    pool = str(workdir / "pool")
    shared = ["--pool-scope", "shared", "--pool-dir", pool, "--heartbeat-interval", "0.3"]
    monkeypatch.setenv(TEST_HOLD_ENV, "8")  # the controller holds each remote freeze 8 s
    _, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    monkeypatch.delenv(TEST_HOLD_ENV)
    node_proc, node = spawn("node", "--mode", "node", *shared, node_id="node-a", prefix=UNSHARE)
    assert node_proc.proc is not None and ctrl is not None
    pid = node_proc.proc.pid

    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "node-dies", cap, 64 * h.MiB)
    vid = vol.volume_id
    staging = workdir / "node" / "globalmount"
    staging.mkdir(parents=True)
    h.stage(node, vol, staging, cap, h.publish(ctrl, vid, "node-a", cap))
    frozen_record = workdir / "pool" / "frozen" / node_key("node-a") / f"{vid}.json"

    with writer_in(pid, staging) as writer:  # the writer also keeps the node's namespace alive
        wait_for(lambda: size_in(writer.pid, staging / "log") > 10 * RECORD, 30, "the writer")
        outcome: list[object] = []

        def cut(name: str) -> None:
            try:
                outcome.append(
                    ctrl.controller.CreateSnapshot(
                        pb.CreateSnapshotRequest(source_volume_id=vid, name=name), timeout=120
                    )
                )
            except grpc.RpcError as e:
                outcome.append(e)

        caller = threading.Thread(target=cut, args=("cut-1",))
        caller.start()
        wait_for(lambda: answered_frozen(workdir, vid), 30, "the node's freeze")
        assert frozen_record.exists()
        assert node is not None
        node.close()
        node_proc.kill(signal.SIGKILL)
        held = size_in(writer.pid, staging / "log")
        time.sleep(1.0)
        assert size_in(writer.pid, staging / "log") == held, "still frozen: the cut stays whole"

        node_proc.prefix = ["nsenter", "-t", str(writer.pid), "-m", "--"]  # the same node
        node = node_proc.start()
        wait_for(lambda: size_in(writer.pid, staging / "log") > held, 30, "the restart's thaw")
        caller.join(60)
        assert outcome and isinstance(outcome[0], grpc.RpcError), outcome
        assert outcome[0].code() == grpc.StatusCode.ABORTED, outcome[0].details()
        assert "thawed" in (outcome[0].details() or "")
        assert not list((workdir / "pool" / "snapshots").glob("*.img")), "the copy was discarded"

        cut("cut-2")  # the CO's retry
        snap = outcome[-1]
        assert isinstance(snap, pb.CreateSnapshotResponse), snap
        assert check_cut(
            workdir, workdir / "pool" / "snapshots" / f"{snap.snapshot.snapshot_id}.img"
        )
    node.close()
