"""(j) Many calls at once: 100 CreateVolume calls sent at once on one connection, against the same
100 sent one after another; and the plugin's RSS before and after 10,000 calls.

A busy external-provisioner (100 workers) sends its CreateVolume calls at once over its one
connection. Each call is timed from the moment it is sent to its answer, so in the burst a call's
latency includes its wait in the driver's queue; the burst's wall time is from the first call
sent to the last answer. The 100 volumes are 256 MiB (sparse: CreateVolume writes nothing) and
block, then deleted; `rounds` rounds alternate which mode goes first, on a fresh connection each,
made before the clock starts.

The memory part sends 10,000 cheap calls that change no state, 100 at a time on one connection,
a mix of ten methods (two of them answer NOT_FOUND, the path of an aborted call): the plugin's
idle RSS before and after them tells whether a call leaves anything behind.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.harness import MiB, Plugin, Stubs, rss_idle
from bench.stats import percentile, summary
from csi_hostpath import csi_requests as rq
from csi_hostpath._pb import csi_pb2 as pb

AT_ONCE = 100
SIZE = 256 * MiB
MEMORY_CALLS = 10_000
MEMORY_BATCH = 100
RSS_GROWTH_GOAL = 10 * MiB
_MISSING = "vol-00000000000000000000000000000000"

Call = tuple[Callable[..., Any], Any, grpc.StatusCode]  # (stub method, request, expected code)


def _send(calls: list[Call], at_once: bool) -> tuple[float, list[float], Counter[str]]:
    """(wall seconds, each call's latency, codes that were not the expected one)."""
    latencies: list[float] = []
    wrong: Counter[str] = Counter()
    lock = threading.Condition()
    start = time.perf_counter()

    def record(sent: float, expected: grpc.StatusCode, future: Any) -> None:
        latency = time.perf_counter() - sent
        code = future.code()
        with lock:
            latencies.append(latency)
            if code != expected:
                wrong[f"{code.name}: {(future.details() or '')[:80]}"] += 1
            lock.notify_all()

    if at_once:
        for method, request, expected in calls:
            sent = time.perf_counter()
            future = method.future(request, timeout=300)
            future.add_done_callback(functools.partial(record, sent, expected))
        with lock:  # each answer is counted by its callback, which may run after the wait
            lock.wait_for(lambda: len(latencies) == len(calls))
    else:
        for method, request, expected in calls:
            sent = time.perf_counter()
            future = method.future(request, timeout=300)
            future.exception()  # waits for the answer before the next call is sent
            record(sent, expected, future)
    wall = time.perf_counter() - start
    with lock:
        return wall, list(latencies), wrong


def _creates(stubs: Stubs, prefix: str) -> list[Call]:
    return [
        (
            stubs.controller.CreateVolume,
            rq.create_volume(f"{prefix}-{i}", rq.block_cap(), SIZE),
            grpc.StatusCode.OK,
        )
        for i in range(AT_ONCE)
    ]


def _delete_created(stubs: Stubs) -> None:
    listed = stubs.controller.ListVolumes(pb.ListVolumesRequest()).entries
    deletes = [
        (stubs.controller.DeleteVolume, rq.delete_volume(e.volume.volume_id), grpc.StatusCode.OK)
        for e in listed
    ]
    _, _, wrong = _send(deletes, at_once=False)  # untimed cleanup
    if wrong:
        raise RuntimeError(f"DeleteVolume failed: {dict(wrong)}")


def _mix(stubs: Stubs) -> list[Call]:
    ok, missing = grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND
    health = health_pb2_grpc.HealthStub(stubs.channel)
    return [
        (stubs.identity.Probe, pb.ProbeRequest(), ok),
        (stubs.identity.GetPluginInfo, pb.GetPluginInfoRequest(), ok),
        (stubs.controller.ControllerGetCapabilities, pb.ControllerGetCapabilitiesRequest(), ok),
        (stubs.node.NodeGetCapabilities, pb.NodeGetCapabilitiesRequest(), ok),
        (stubs.node.NodeGetInfo, pb.NodeGetInfoRequest(), ok),
        (stubs.controller.GetCapacity, pb.GetCapacityRequest(), ok),
        (stubs.controller.ListVolumes, pb.ListVolumesRequest(), ok),
        (health.Check, health_pb2.HealthCheckRequest(), ok),
        (
            stubs.controller.ControllerGetVolume,
            pb.ControllerGetVolumeRequest(volume_id=_MISSING),
            missing,
        ),
        (stubs.node.NodeGetVolumeStats, rq.volume_stats(_MISSING, "/nonexistent"), missing),
    ]


def _figures(wall: float, latencies: list[float], wrong: Counter[str]) -> dict[str, Any]:
    ms = [s * 1000 for s in latencies]
    return {
        "wall_seconds": wall,
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "latency": summary(latencies),
        "errors": dict(wrong),
    }


def concurrency(work: Path, node_id: str, rounds: int) -> dict[str, Any]:
    # 100 x 256 MiB promised at once is more than a shared disk may hold; the files stay sparse.
    plugin = Plugin(work / "plugin", node_id, extra=("--overcommit-ratio", "1000"))
    stubs = plugin.start()
    out: dict[str, Any] = {"calls": AT_ONCE, "size_bytes": SIZE, "rounds": rounds}
    try:
        out["rss_start_bytes"] = rss_idle(plugin.pid)
        modes: dict[str, list[tuple[float, list[float], Counter[str]]]] = {
            "in_turn": [],
            "at_once": [],
        }
        for index in range(rounds):
            order = ("in_turn", "at_once") if index % 2 == 0 else ("at_once", "in_turn")
            for mode in order:
                fresh = Stubs(plugin.socket, private=True)
                fresh.wait_ready()
                try:
                    calls = _creates(fresh, f"{mode}-{index}")
                    modes[mode].append(_send(calls, at_once=mode == "at_once"))
                finally:
                    fresh.close()
                _delete_created(stubs)
        for mode, runs in modes.items():
            wrong: Counter[str] = Counter()
            for _, _, w in runs:
                wrong.update(w)
            walls = [wall for wall, _, _ in runs]
            figures = _figures(sum(walls) / len(walls), [x for _, ls, _ in runs for x in ls], wrong)
            figures["walls_seconds"] = walls
            out[mode] = figures
            print(
                f"  100 CreateVolume {mode}: wall {figures['wall_seconds']:.2f} s, "
                f"p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms",
                flush=True,
            )
        out["rss_before_bytes"] = rss_idle(plugin.pid)
        mix = _mix(stubs)
        wrong = Counter()
        started = time.perf_counter()
        for batch in range(MEMORY_CALLS // MEMORY_BATCH):
            calls = [mix[(batch * MEMORY_BATCH + i) % len(mix)] for i in range(MEMORY_BATCH)]
            wrong.update(_send(calls, at_once=True)[2])
        out["memory_calls"] = MEMORY_CALLS
        out["memory_seconds"] = time.perf_counter() - started
        out["memory_errors"] = dict(wrong)
        out["rss_after_bytes"] = rss_idle(plugin.pid)
        growth = out["rss_after_bytes"] - out["rss_before_bytes"]
        print(f"  RSS growth over {MEMORY_CALLS} calls: {growth / MiB:.1f} MiB", flush=True)
    finally:
        stubs.close()
        plugin.stop()
    return out


def rows(data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """bench.md's rows for (j): (figure, measured, target, verdict met/missed/"")."""
    out = []
    for mode, label in (("in_turn", "one after another"), ("at_once", "at once, one connection")):
        figures = data.get(mode)
        if figures is None:
            continue
        errors = sum(figures["errors"].values())
        out.append(
            (
                f"{data['calls']} CreateVolume {label} (mean of {data['rounds']} rounds)",
                f"wall {figures['wall_seconds']:.2f} s; per call p50 {figures['p50_ms']:.1f} ms, "
                f"p99 {figures['p99_ms']:.1f} ms; errors {errors}",
                "no errors",
                "met" if errors == 0 else "missed",
            )
        )
    if "rss_after_bytes" in data:
        growth = data["rss_after_bytes"] - data["rss_before_bytes"]
        errors = sum(data["memory_errors"].values())
        out.append(
            (
                f"plugin RSS before / after {data['memory_calls']:,} calls (100 at a time); "
                "unexpected answers",
                f"{data['rss_before_bytes'] / MiB:.1f} / {data['rss_after_bytes'] / MiB:.1f} MiB "
                f"(**{growth / MiB:+.1f} MiB**); {errors}",
                "growth < 10 MiB, 0",
                "met" if growth < RSS_GROWTH_GOAL and errors == 0 else "missed",
            )
        )
    return out
