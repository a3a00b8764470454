"""The chaos run's plan, a pure function of its seed: when each fault comes and the order in which
its targets are tried, and the lifecycles of claims to run, in order. The same seed gives the
same plan, so a failure can be run again; what the cluster makes of it (which target was up at
a tick, how far each lifecycle got) is recorded beside it."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from tests.k8s.faults.matrix import COMPONENTS

# The nodes a target names by role: resolved to names when the run starts.
ROLES = ("control-plane", "worker0", "worker1", "controller")
KINDS = ("rwo", "rwop", "block", "snapshot", "clone")


def slots() -> list[tuple[str, str]]:
    """Every (component, node role) a fault can hit: the control plane's static pods on its node,
    the kubelet and containerd on every node, the controller's containers where it runs, the node
    plugin and registrar on each worker."""
    out = []
    for c in COMPONENTS:
        if c.kind == "static":
            roles: tuple[str, ...] = ("control-plane",)
        elif c.kind == "unit":
            roles = ("control-plane", "worker0", "worker1")
        elif c.pod == "controller":
            roles = ("controller",)
        else:
            roles = ("worker0", "worker1")
        out += [(c.name, r) for r in roles]
    return out


@dataclass(frozen=True)
class Tick:
    at: float  # seconds after the start
    # Every slot, in the order tried: the first whose component runs then is killed (a container
    # in the kubelet's restart back-off is not running, and is passed over).
    order: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LifecycleSpec:
    index: int
    kind: str
    first: int  # the worker (0 or 1) its data are written on
    move: bool  # read back on the other worker (else where written)


@dataclass(frozen=True)
class Plan:
    seed: int
    minutes: float
    ticks: tuple[Tick, ...]
    lifecycles: tuple[LifecycleSpec, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "minutes": self.minutes,
            "ticks": [{"at": round(t.at, 3), "first": list(t.order[0])} for t in self.ticks],
            "lifecycles": [asdict(s) for s in self.lifecycles],
        }


def plan(seed: int, minutes: float, interval: float, lifecycles: int = 0) -> Plan:
    """Faults at intervals drawn between half and one and a half `interval` seconds for
    `minutes`; `lifecycles` specs (by default one per 20 s, more than a run gets through)."""
    if interval <= 0 or minutes <= 0:
        raise ValueError("the chaos run needs minutes and an interval above 0")
    faults = random.Random(f"faults-{seed}")
    every = slots()
    ticks = []
    at = faults.uniform(0.5, 1.5) * interval
    while at < minutes * 60:
        order = list(every)
        faults.shuffle(order)
        ticks.append(Tick(at, tuple(order)))
        at += faults.uniform(0.5, 1.5) * interval
    draws = random.Random(f"lifecycles-{seed}")
    count = lifecycles or max(1, int(minutes * 3))
    specs = tuple(
        LifecycleSpec(i, draws.choice(KINDS), draws.randrange(2), draws.random() < 0.5)
        for i in range(count)
    )
    return Plan(seed, minutes, tuple(ticks), specs)
