"""The chaos run: for MINUTES, kill -9 of a component from the matrix at the seed's ticks, while
a few threads run the seed's lifecycles of claims one after another; then the faults stop, the
components come back, the lives in progress finish, and the checks at rest run. It counts the
faults injected, the lives and how each ended, and every invariant violation."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.k8s.experiments.context import log
from tests.k8s.experiments.kube import Kube
from tests.k8s.faults import invariants as inv
from tests.k8s.faults.harness import Harness
from tests.k8s.faults.killer import Target
from tests.k8s.faults.lifecycle import Life, Outcome
from tests.k8s.faults.matrix import component
from tests.k8s.faults.observe import wait_for
from tests.k8s.faults.sampler import Sampler
from tests.k8s.faults.schedule import Plan, slots

NOT_BACK = "not-back"  # a component that did not run again after the faults stopped


@dataclass
class ChaosReport:
    seed: int
    minutes: float
    # One entry per tick: its time, the target killed (or "" when none was running), the pid.
    events: list[dict[str, Any]] = field(default_factory=list)
    lives: list[Outcome] = field(default_factory=list)
    violations: list[inv.Violation] = field(default_factory=list)
    samples: str = ""
    seconds: float = 0.0

    def faults(self) -> Counter[str]:
        return Counter(str(e["component"]) for e in self.events if e.get("component"))

    def counts(self) -> dict[str, Any]:
        ended = Counter(o.result for o in self.lives)
        kinds = Counter(str(v.kind) for v in self.violations)
        return {
            "faults injected": sum(self.faults().values()),
            "ticks with no target running": sum(1 for e in self.events if not e.get("component")),
            "lifecycles": len(self.lives),
            **{
                f"lifecycles {k}": ended.get(k, 0)
                for k in ("completed", "data-lost", "stuck", "error")
            },
            "data lost": ended.get("data-lost", 0) + kinds.get(inv.DATA, 0),
            "double writers": kinds.get(inv.DOUBLE_WRITER, 0) + kinds.get(inv.DOUBLE_HOLD, 0),
            "leaks": kinds.get(inv.LEAK, 0),
            "ledger vs attachments": kinds.get(inv.DISAGREE, 0),
            "components not back": kinds.get(NOT_BACK, 0),
            "unread checks": kinds.get("unread", 0),
        }

    @property
    def ok(self) -> bool:
        c = self.counts()
        return not self.violations and c["lifecycles data-lost"] == 0 and c["lifecycles"] > 0

    def render(self) -> str:
        lines = [f"chaos run, seed {self.seed}, {self.minutes:g} min ({self.seconds:.0f} s in all)"]
        lines += [f"  {k:<30} {v}" for k, v in self.counts().items()]
        lines.append(
            "  faults by component: "
            + ", ".join(f"{c} {n}" for c, n in sorted(self.faults().items()))
        )
        lines += [f"  VIOLATION {v.kind}: {v.detail}" for v in self.violations[:20]]
        lines.append(f"  samples: {self.samples}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "minutes": self.minutes,
            "seconds": self.seconds,
            "counts": self.counts(),
            "events": self.events,
            "lives": [asdict(o) for o in self.lives],
            "violations": [asdict(v) for v in self.violations],
            "samples": self.samples,
        }


def roles(h: Harness) -> dict[str, str]:
    w = h.ctx.workers
    return {
        "control-plane": h.control_plane,
        "worker0": w[0],
        "worker1": w[1],
        "controller": h.controller_node(),
    }


class Chaos:
    def __init__(self, h: Harness, plan: Plan, concurrency: int) -> None:
        self.h, self.plan, self.concurrency = h, plan, concurrency
        self.report = ChaosReport(plan.seed, plan.minutes)
        self.nodes = roles(h)
        self.stop = threading.Event()
        self._next = iter(plan.lifecycles)
        self._lock = threading.Lock()
        self.not_back: list[inv.Violation] = []

    def warm(self) -> None:
        """Learn every release pod's name while the API answers: the fault thread can't ask it
        while the API server is down."""
        for comp, role in slots():
            c = component(comp)
            if c.kind == "container":
                self.h.pod_prefix(c.pod, self.nodes[role])

    def faults(self, began: float) -> None:
        for tick in self.plan.ticks:
            if self.stop.wait(max(0.0, began + tick.at - time.monotonic())):
                return
            event: dict[str, Any] = {"at": round(time.monotonic() - began, 1), "component": ""}
            for comp, role in tick.order:
                target = Target(comp, self.nodes[role])
                try:
                    if not self.h.killer.is_up(target):
                        continue
                    kill = self.h.killer.kill(target)
                except Exception:  # it went away between the look and the kill: try the next
                    continue
                event.update(component=comp, node=target.node, pid=kill.pid)
                break
            self.report.events.append(event)
            log(
                f"  chaos t+{event['at']:.0f}s: kill -9 "
                f"{event.get('component') or '(none running)'} {event.get('node', '')}"
            )

    def lives(self, end: float) -> None:
        kube = Kube(self.h.ctx.kube.kubeconfig, self.h.ctx.kube.kubectl_path)
        ctx = dataclasses.replace(self.h.ctx, kube=kube)
        try:
            while time.monotonic() < end:
                with self._lock:
                    spec = next(self._next, None)
                if spec is None:
                    return
                outcome = Life(ctx, spec, self.plan.seed, self.h.args.timeout).run()
                log(
                    f"  chaos life {spec.index} ({spec.kind}, move {spec.move}): "
                    f"{outcome.result} in {outcome.seconds:.0f} s {outcome.detail[:200]}"
                )
                with self._lock:
                    self.report.lives.append(outcome)
        finally:
            kube.close()

    def run(self) -> ChaosReport:
        self.warm()
        began = time.monotonic()
        end = began + self.plan.minutes * 60
        log(
            f"chaos: seed {self.plan.seed}, {len(self.plan.ticks)} ticks in "
            f"{self.plan.minutes:g} min, {self.concurrency} lives at a time"
        )
        with Sampler(self.h.observer, self.h.args.sample_interval) as sampler:
            faults = threading.Thread(target=self.faults, args=(began,), daemon=True)
            workers = [
                threading.Thread(target=self.lives, args=(end,), daemon=True)
                for _ in range(self.concurrency)
            ]
            faults.start()
            for w in workers:
                w.start()
            faults.join(timeout=self.plan.minutes * 60 + 60)
            self.stop.set()
            log("chaos: the faults stopped; waiting for every component and the lives in progress")
            for comp, role in slots():
                target = Target(comp, self.nodes[role])
                try:
                    wait_for(
                        f"{target} running after the run",
                        functools.partial(self.h.killer.is_up, target),
                        self.h.args.back_timeout,
                    )
                except Exception as e:  # a component that never came back is a finding
                    self.not_back.append(inv.Violation(NOT_BACK, str(e)))
            for w in workers:
                w.join(timeout=self.h.args.timeout * 6)
        self.report.violations = list(sampler.report.violations) + self.not_back
        self.report.samples = sampler.report.summary()
        self.report.violations += self.h.observer.settled(self.h.before, 300)
        self.report.seconds = time.monotonic() - began
        return self.report
