"""n: CSINode's allocatable count follows the loop devices the node can still get. The chart sets
the CSIDriver's nodeAllocatableUpdatePeriodSeconds, so the kubelet asks NodeGetInfo again every
period; the driver counts its max_volumes_per_node from the kernel (held + free + creatable loop
devices). Loop devices taken on the node by something else (losetup on scratch files) lower it;
given back, it rises again.

The kernel's loop devices are shared by everything on the machine (other clusters, other tests
binding and releasing a few of theirs meanwhile), so the count also moves by theirs: enough devices
are taken that ours dominate, and each wait is for the count to have moved by at least TAKEN less
SLACK, in that direction."""

from __future__ import annotations

import time

from tests.k8s.experiments.context import DRIVER, Ctx, expect, experiment, log
from tests.k8s.experiments.kube import until

TAKEN = 32
# How many devices others may bind or release on the kernel between two of the kubelet's reads
# without failing the experiment.
SLACK = 8
SCRATCH = "/var/tmp/e2e-n-loop"


def allocatable(ctx: Ctx, node: str) -> int | None:
    obj = ctx.kube.get("storage.k8s.io/v1", "CSINode", node) or {}
    for d in (obj.get("spec") or {}).get("drivers") or []:
        if d.get("name") == DRIVER:
            count = (d.get("allocatable") or {}).get("count")
            return int(count) if count is not None else None
    return None


def _period(ctx: Ctx) -> int:
    obj = ctx.kube.get("storage.k8s.io/v1", "CSIDriver", DRIVER) or {}
    return int((obj.get("spec") or {}).get("nodeAllocatableUpdatePeriodSeconds") or 0)


def _take(ctx: Ctx, node: str) -> list[str]:
    script = (
        f"for i in $(seq 1 {TAKEN}); do truncate -s 1M {SCRATCH}-$i"
        f" && losetup -f --show {SCRATCH}-$i || exit 1; done"
    )
    return ctx.nodes.exec(node, ["sh", "-c", script]).split()


def _bound(ctx: Ctx, node: str) -> int:
    """Loop devices bound on the kernel, as the node sees them (every node sees all)."""
    return len(ctx.nodes.exec(node, ["losetup", "-a"]).splitlines())


def _give_back(ctx: Ctx, node: str, devices: list[str]) -> None:
    for dev in devices:
        ctx.nodes.exec(node, ["losetup", "-d", dev])
    ctx.nodes.exec(node, ["sh", "-c", f"rm -f {SCRATCH}-*"])


@experiment("n", "CSINode allocatable follows loop devices taken and given back on the node")
def allocatable_follows(ctx: Ctx) -> None:
    node = ctx.workers[0]
    period = _period(ctx)
    expect("the CSIDriver has a nodeAllocatableUpdatePeriodSeconds", period >= 10, period)
    before = until("an allocatable count", lambda: allocatable(ctx, node), 60)
    log(
        f"  {node}: allocatable {before}, period {period} s;"
        f" bound on the kernel: {_bound(ctx, node)}"
    )
    taken: list[str] = []
    try:
        taken = _take(ctx, node)
        started = time.monotonic()
        expect(f"{TAKEN} loop devices taken on {node}", len(taken) == TAKEN, taken)
        log(f"  taken: {' '.join(taken)}; bound on the kernel now: {_bound(ctx, node)}")
        lowered = until(
            f"the count at or below {before - TAKEN + SLACK}",
            lambda: (
                c
                if (c := allocatable(ctx, node)) is not None and c <= before - TAKEN + SLACK
                else None
            ),
            3 * period + 30,
            2,
        )
        log(
            f"  allocatable {lowered} after {time.monotonic() - started:.0f} s;"
            f" bound on the kernel: {_bound(ctx, node)}"
        )
        _give_back(ctx, node, taken)
        taken = []
        started = time.monotonic()
        raised = until(
            f"the count at or above {lowered + TAKEN - SLACK}",
            lambda: (
                c
                if (c := allocatable(ctx, node)) is not None and c >= lowered + TAKEN - SLACK
                else None
            ),
            3 * period + 30,
            2,
        )
        log(
            f"  given back: allocatable {raised} after {time.monotonic() - started:.0f} s;"
            f" bound on the kernel: {_bound(ctx, node)}"
        )
    finally:
        if taken:
            _give_back(ctx, node, taken)
