"""`csi-hostpath demo`: take one volume through every phase against a running driver, printing
where it stands after each step, then clean up. What a newcomer runs second."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.service.inspect import inspect_volume, render_phases
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout

MiB = 1 << 20
DEMO_CAPABILITY = rq.mount_cap("ext4")


def _make_dirs(*paths: Path) -> None:
    for path in paths:
        path.mkdir()


def _remove_dirs(*paths: Path) -> None:
    for path in paths:
        if path.is_dir() and not os.path.ismount(path):
            path.rmdir()


def wait_for_heartbeat(layout: PoolLayout, node_id: str, since: float) -> None:
    """The node reports what it staged in its heartbeat, written just after each node call:
    wait (briefly) for one newer than the step, so the table shows the step's effect."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        reported = layout.last_report(node_id)
        if reported is not None and reported >= since:
            return
        time.sleep(0.02)


def run_demo(endpoint: str, state_dir: Path, pool_dir: Path, out: TextIO) -> int:
    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
    except grpc.FutureTimeoutError:
        out.write(f"no driver answers on {endpoint}: start one first (make run)\n")
        return 1
    identity = pb_grpc.IdentityStub(channel)
    controller = pb_grpc.ControllerStub(channel)
    node = pb_grpc.NodeStub(channel)
    info = identity.GetPluginInfo(pb.GetPluginInfoRequest())
    node_id = node.NodeGetInfo(pb.NodeGetInfoRequest()).node_id
    out.write(f"driver {info.name} {info.vendor_version}, node {node_id}\n")
    store = Store(state_dir / "state.db")
    layout = PoolLayout(pool_dir)
    work = Path(tempfile.mkdtemp(prefix="csihp-demo-"))
    staging, target = work / "globalmount", work / "pod" / "mount"
    # As the kubelet does: the staging directory and the target's parent; the driver makes the
    # target itself.
    _make_dirs(staging, target.parent)
    undo: list[Callable[[], object]] = []
    volume_id = ""

    def show(step: str, node_step: bool = False) -> None:
        if node_step:
            wait_for_heartbeat(layout, node_id, time.time())
        out.write(f"\n== {step}\n")
        out.write(render_phases(inspect_volume(store, layout, volume_id, 60.0)) + "\n")

    try:
        vol = controller.CreateVolume(
            rq.create_volume(f"demo-{int(time.time())}", DEMO_CAPABILITY, 64 * MiB)
        ).volume
        volume_id = vol.volume_id
        undo.append(lambda: controller.DeleteVolume(rq.delete_volume(volume_id)))
        show(f"CreateVolume: {volume_id}, a 64 MiB sparse file in the pool")

        ctx = controller.ControllerPublishVolume(
            rq.controller_publish(volume_id, node_id, DEMO_CAPABILITY)
        ).publish_context
        undo.append(
            lambda: controller.ControllerUnpublishVolume(
                rq.controller_unpublish(volume_id, node_id)
            )
        )
        show(f"ControllerPublishVolume: the ledger gives {node_id} generation {ctx['generation']}")

        node.NodeStageVolume(
            rq.node_stage(volume_id, staging, DEMO_CAPABILITY, ctx, vol.volume_context)
        )
        undo.append(lambda: node.NodeUnstageVolume(rq.node_unstage(volume_id, staging)))
        show(f"NodeStageVolume: loop device attached, ext4 made and mounted at {staging}", True)

        node.NodePublishVolume(
            rq.node_publish(volume_id, staging, target, DEMO_CAPABILITY, publish_context=ctx)
        )
        undo.append(lambda: node.NodeUnpublishVolume(rq.node_unpublish(volume_id, target)))
        (target / "hello.txt").write_text("written through the bind mount\n")
        show(f"NodePublishVolume: bound at {target}; a pod would see it now", True)
        stats = node.NodeGetVolumeStats(rq.volume_stats(volume_id, target))
        used = stats.usage[0]
        out.write(
            f"\nNodeGetVolumeStats: {used.used} of {used.total} bytes used; condition "
            f"{'abnormal' if stats.volume_condition.abnormal else 'normal'}\n"
        )
    finally:
        out.write("\n== teardown, in the order Kubernetes uses\n")
        for step in reversed(undo):
            step()
        if volume_id:
            show("after DeleteVolume")
        store.close()
        channel.close()
        _remove_dirs(target, target.parent, staging, work)
    return 0
