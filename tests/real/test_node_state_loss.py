"""A node plugin on lost state never tears down a running pod's mounts, and always serves.

A node plugin on lost state, on real devices: a node plugin that starts
without its records, or with a leftover it can't take down, never tears down a running pod's
mounts, and always starts and serves."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.naming import node_key
from csi_hostpath.store.db import Store
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, released_after_teardown
from tests.support.processes import inspect


def _split(spawn: Any, workdir: Path) -> tuple[Any, Any, Any]:
    """A controller and a node plugin sharing one pool, as in a Kubernetes deployment: the
    node's state directory is its own, so it can be lost while the pool stays."""
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    _, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    node_handle, node = spawn("node", "--mode", "node", *shared, "--fence-interval", "0.5")
    return ctrl, node_handle, node


def staged(ctrl: Any, node: Any, workdir: Path) -> tuple[Any, Any, Any, Path, Path]:
    """An ext4 volume the controller published to node-a and the node staged, at the kubelet's
    paths: (volume, capability, publish context, staging path, target path not yet made)."""
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "live", cap, 32 * h.MiB)
    ctx = h.publish(ctrl, vol.volume_id, "node-a", cap)
    staging, target = workdir / "kubelet" / "globalmount", workdir / "kubelet" / "pod" / "mount"
    staging.mkdir(parents=True)
    h.stage(node, vol, staging, cap, ctx)
    return vol, cap, ctx, staging, target


def _staged_and_published(ctrl: Any, node: Any, workdir: Path) -> tuple[Any, Path, Path, bytes]:
    vol, cap, _, staging, target = staged(ctrl, node, workdir)
    h.node_publish(node, vol.volume_id, staging, target, cap)
    data = h.write_pattern(target / "data", 1 * h.MiB)
    return vol, staging, target, data


def _take_down(node: Any, vol_id: str, staging: Path, target: Path, workdir: Path) -> None:
    """The CO's teardown still works on what the plugin kept."""
    h.node_unpublish(node, vol_id, target)
    assert not h.mounted(target)
    h.unstage(node, vol_id, staging)
    assert not h.mounted(staging)
    left = released_after_teardown(workdir, target, staging)
    assert not left, f"NodeUnstage left the adopted device attached: {left}"


def _restart_on_empty_state(
    spawn: Any, workdir: Path, *, forget_heartbeat: bool
) -> tuple[Any, Any, Any, Path, Path, bytes]:
    ctrl, handle, node = _split(spawn, workdir)
    vol, staging, target, data = _staged_and_published(ctrl, node, workdir)
    node.close()
    handle.kill(signal.SIGKILL)
    shutil.rmtree(workdir / "node-state")  # state.db and all: a new or mistyped --state-dir
    if forget_heartbeat:
        (workdir / "pool" / "nodes" / f"{node_key('node-a')}.json").unlink()
    return handle, handle.start(), vol, staging, target, data


def test_node_restarted_on_empty_state_keeps_and_readopts_pod_mounts(
    spawn: Any, workdir: Path
) -> None:
    handle, node, vol, staging, target, data = _restart_on_empty_state(
        spawn, workdir, forget_heartbeat=False
    )
    try:
        assert h.mounted(staging) and h.mounted(target), "a running pod's mounts were torn down"
        assert (target / "data").read_bytes() == data
        assert "RE-ADOPTED" in handle.log()
        stats = node.node.NodeGetVolumeStats(
            pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=str(target))
        )
        assert not stats.volume_condition.abnormal, stats.volume_condition.message
        _take_down(node, vol.volume_id, staging, target, workdir)
    finally:
        node.close()


def test_node_restarted_without_records_or_heartbeat_leaves_mounts_in_place(
    spawn: Any, workdir: Path
) -> None:
    handle, node, vol, staging, target, data = _restart_on_empty_state(
        spawn, workdir, forget_heartbeat=True
    )
    try:
        assert h.mounted(staging) and h.mounted(target)
        assert (target / "data").read_bytes() == data
        assert "UNCLAIMED VOLUME LEFT IN PLACE" in handle.log()
        assert loops_backed_under(workdir), "the device a pod uses was detached"
        staged = inspect(workdir, vol.volume_id)["staged"]
        assert staged["state"] == "stuck" and "left it in place" in staged["reason"], staged
    finally:
        node.close()


def test_busy_leftover_mount_does_not_stop_the_node_plugin(spawn: Any, workdir: Path) -> None:
    """A publication whose staging record is gone, on a target a process holds busy: the old
    reconcile unmounted it, failed with "target is busy", and the plugin never started."""
    ctrl, handle, node = _split(spawn, workdir)
    vol, staging, target, data = _staged_and_published(ctrl, node, workdir)
    node.close()
    handle.kill(signal.SIGKILL)
    store = Store(workdir / "node-state" / "state.db")
    try:
        store.delete_staging(vol.volume_id)
    finally:
        store.close()
    (workdir / "pool" / "nodes" / f"{node_key('node-a')}.json").unlink()
    holder = subprocess.Popen(["sleep", "600"], cwd=target)
    try:
        started = time.monotonic()
        node = handle.start()
        assert time.monotonic() - started < 15
        info = node.node.NodeGetInfo(pb.NodeGetInfoRequest())
        assert info.node_id == "node-a"
        assert h.mounted(target) and (target / "data").read_bytes() == data
    finally:
        holder.kill()
        holder.wait(timeout=10)
    try:
        _take_down(node, vol.volume_id, staging, target, workdir)
    finally:
        node.close()
