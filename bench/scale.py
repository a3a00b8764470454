"""(h) Scale: what one node call costs with 10, 100 and 500 ext4 volumes staged beside it, and how
long a restart takes until Probe answers ready with that many staged.

A plugin of its own (the same node ID, its own state directory) stages the background volumes
(CreateVolume → ControllerPublishVolume → NodeStageVolume, a few at a time) up to each level.
At each level a fixed set of probe volumes goes through ControllerPublishVolume → NodeStage →
NodePublish → NodeUnpublish → NodeUnstage → ControllerUnpublishVolume, one at a time, each call
timed; the first round is a warm-up. Then the plugin is stopped (SIGTERM) and started again, timed
from the spawn until Probe answers ready=true: the reconcile of everything staged is inside that.

The restart's target allows for mount(2) itself: a restart after a reboot must mount every volume
again, and no driver does that for less than the kernel charges. So the run measures one ext4
mount(2) + umount2(2) of a loop device directly (the driver's own fast path, no tool) and the
target is 2 s + N x that p50.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from bench.harness import GiB, Plugin, Stubs, cap_for
from bench.lifecycle import Volume, stepper, teardown
from bench.report import SCALE_CALLS as CALLS
from bench.stats import summary
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.system.linux.linux_mounts import sys_mount, sys_umount

LEVELS = (10, 100, 500)
# 500 sparse volumes promise more than the disk holds, though they use a few MiB each.
PLUGIN_FLAGS = ("--overcommit-ratio", "1000")
KIND = "ext4"
_STAGERS = 4


def _stage(stubs: Stubs, work: Path, node_id: str, name: str, size: int) -> Volume:
    """CreateVolume → ControllerPublish → NodeStage, untimed: a background volume."""
    cap = cap_for(KIND)
    staging = work / "staging" / name
    staging.mkdir(parents=True, exist_ok=True)
    vol = Volume(staging=staging)
    created = stubs.controller.CreateVolume(rq.create_volume(name, cap, size))
    vol.volume_id = created.volume.volume_id
    published = stubs.controller.ControllerPublishVolume(
        rq.controller_publish(vol.volume_id, node_id, cap)
    )
    vol.published = True
    context = dict(published.publish_context)
    volume_context = created.volume.volume_context
    stubs.node.NodeStageVolume(rq.node_stage(vol.volume_id, staging, cap, context, volume_context))
    vol.staged = True
    return vol


def one_round(
    stubs: Stubs, work: Path, node_id: str, volume_id: str, index: int
) -> dict[str, float]:
    """One probe volume through the node calls, each timed; the volume stays created."""
    cap = cap_for(KIND)
    staging = work / "staging" / f"probe-{index}"
    staging.mkdir(parents=True, exist_ok=True)
    target = work / "pods" / f"probe-{index}" / "mount"
    target.parent.mkdir(parents=True, exist_ok=True)  # as the kubelet does
    vol = Volume(volume_id=volume_id, staging=staging, target=target)
    steps: dict[str, float] = {}
    step = stepper(steps)
    try:
        published = step(
            "ControllerPublishVolume",
            lambda: stubs.controller.ControllerPublishVolume(
                rq.controller_publish(volume_id, node_id, cap)
            ),
        )
        assert isinstance(published, pb.ControllerPublishVolumeResponse)
        vol.published = True
        context = dict(published.publish_context)
        step(
            "NodeStageVolume",
            lambda: stubs.node.NodeStageVolume(rq.node_stage(volume_id, staging, cap, context)),
        )
        vol.staged = True
        step(
            "NodePublishVolume",
            lambda: stubs.node.NodePublishVolume(
                rq.node_publish(volume_id, staging, target, cap, publish_context=context)
            ),
        )
        vol.node_published = True
        teardown(stubs, vol, node_id, step, delete=False)
    finally:
        with contextlib.suppress(grpc.RpcError):
            teardown(stubs, vol, node_id, None, delete=False)
    return steps


def _probe_ready(stubs: Stubs, deadline: float) -> None:
    while True:
        try:
            if stubs.identity.Probe(pb.ProbeRequest(), timeout=5).ready.value:
                return
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
        if time.monotonic() > deadline:
            raise RuntimeError("Probe did not answer ready within the deadline")
        time.sleep(0.005)


def restart(plugin: Plugin, stubs: Stubs) -> tuple[Stubs, float]:
    """Stop the plugin, start it again; the seconds from the spawn to Probe ready=true."""
    stubs.close()
    plugin.stop()
    start = time.perf_counter()
    fresh = plugin.start(timeout=120)
    _probe_ready(fresh, time.monotonic() + 120)
    return fresh, time.perf_counter() - start


def mount_cost(work: Path, samples: int = 30) -> dict[str, float]:
    """mount(2) + umount2(2) of an ext4 loop device, called directly: what the kernel charges a
    restart that must mount a volume again. One warm-up, then samples rounds."""
    root = Path(tempfile.mkdtemp(prefix="mountcost-", dir=work))
    image, point = root / "fs.img", root / "mnt"
    point.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(GiB)
    subprocess.run(
        ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(image)],
        check=True,
    )
    device = subprocess.run(
        ["losetup", "--direct-io=on", "--find", "--show", str(image)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    times: list[float] = []
    try:
        for index in range(samples + 1):
            start = time.perf_counter()
            sys_mount(device, str(point), "ext4", 0)
            elapsed = time.perf_counter() - start
            sys_umount(str(point), 0)
            if index:
                times.append(elapsed)
    finally:
        with contextlib.suppress(OSError):
            if os.path.ismount(point):
                sys_umount(str(point), 0)
        subprocess.run(["losetup", "-d", device], check=False)
        image.unlink(missing_ok=True)
    return summary(times)


def scale(
    work: Path, node_id: str, levels: tuple[int, ...], samples: int, size: int
) -> dict[str, Any]:
    """Every level's per-call summaries and restart seconds, and the mount(2) cost."""
    work.mkdir(parents=True, exist_ok=True)
    plugin = Plugin(work / "plugin", node_id, extra=PLUGIN_FLAGS)
    stubs = plugin.start()
    background: list[Volume] = []
    probes: list[str] = []
    out: dict[str, Any] = {"levels": {}, "samples": samples, "kind": KIND}
    try:
        probes = make_probes(stubs, work, node_id, samples + 1, size)
        for level in levels:
            background += stage_many(stubs, work, node_id, range(len(background), level), size)
            print(f"  {level} staged; timing the node calls ...", flush=True)
            runs = [one_round(stubs, work, node_id, v, i) for i, v in enumerate(probes)][1:]
            stubs, restarted = restart(plugin, stubs)
            out["levels"][str(level)] = {
                "calls": {name: summary([r[name] for r in runs]) for name in CALLS},
                "restart_seconds": restarted,
            }
            print(f"  restart with {level} staged: {restarted:.2f} s", flush=True)
        out["mount"] = mount_cost(work)
    finally:
        with ThreadPoolExecutor(max_workers=_STAGERS) as pool:
            list(pool.map(lambda v: _quiet_teardown(stubs, v, node_id), background))
        for volume_id in probes:
            with contextlib.suppress(grpc.RpcError):
                stubs.controller.DeleteVolume(rq.delete_volume(volume_id))
        stubs.close()
        plugin.stop()
    return out


def stage_many(stubs: Stubs, work: Path, node_id: str, indices: range, size: int) -> list[Volume]:
    with ThreadPoolExecutor(max_workers=_STAGERS) as pool:
        return list(
            pool.map(lambda i: _stage(stubs, work, node_id, f"scale-bg-{i}", size), indices)
        )


def make_probes(stubs: Stubs, work: Path, node_id: str, count: int, size: int) -> list[str]:
    """count volumes, each formatted by one untimed round, so no timed NodeStage pays mkfs."""
    probes = []
    for index in range(count):
        created = stubs.controller.CreateVolume(
            rq.create_volume(f"scale-probe-{index}", cap_for(KIND), size)
        )
        probes.append(created.volume.volume_id)
        one_round(stubs, work, node_id, created.volume.volume_id, index)
    return probes


def _quiet_teardown(stubs: Stubs, vol: Volume, node_id: str) -> None:
    with contextlib.suppress(grpc.RpcError):
        teardown(stubs, vol, node_id, None)
    if vol.staging is not None:
        with contextlib.suppress(OSError):
            vol.staging.rmdir()
