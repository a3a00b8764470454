"""One cell: a volume brought to its phase, the action, kill -9 of the component when the trigger
holds, the component waited for, the phase waited for, the data checked, everything deleted and
the checks at rest run, while the sampler watches mounts and the ledger the whole time."""

from __future__ import annotations

import contextlib
import functools
import time
import traceback

from tests.k8s.experiments import runner
from tests.k8s.experiments.context import log
from tests.k8s.experiments.kube import Failed
from tests.k8s.faults import hostside
from tests.k8s.faults.harness import Harness, node_init_pid
from tests.k8s.faults.killer import Kill, NotRunning
from tests.k8s.faults.matrix import TRIGGERS, Cell, phase
from tests.k8s.faults.observe import wait_for
from tests.k8s.faults.phases import Subject
from tests.k8s.faults.results import CellResult
from tests.k8s.faults.sampler import Sampler


def namespace_of(cell_id: str) -> str:
    return "fault-" + cell_id.replace("/", "-")


def await_trigger(subject: Subject, cell: Cell, timeout: float) -> str:
    """Poll the trigger (and the phase's end) fast; "in-phase" when the trigger came first,
    "late" when the phase was already done: the kill still happens, and the row says so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a read may fail; the next poll tries again
            if subject.triggered(cell.trigger):
                return "late" if subject.done(cell.phase) else "in-phase"
        with contextlib.suppress(Exception):
            if subject.done(cell.phase):
                return "late"
        time.sleep(0.2)
    raise Failed(
        f"timed out after {timeout:.0f} s waiting for the trigger: {TRIGGERS[cell.trigger]}"
    )


def await_unstage_on_host(subject: Subject, node_init: int, timeout: float) -> str:
    """The target-gone trigger read from the host, every few milliseconds: NodeUnstageVolume
    ends sooner than one `docker exec` can look."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        where = subject.unstage_window(hostside.mount_points(node_init))
        if where != "before":
            return "in-phase" if where == "in" else "late"
        time.sleep(0.002)
    raise Failed(
        f"timed out after {timeout:.0f} s waiting for the trigger: {TRIGGERS['target-gone']}"
    )


def run_cell(h: Harness, cell: Cell) -> CellResult:
    ns = namespace_of(cell.id)
    began = time.monotonic()
    result = CellResult(cell.id, "passed", 0.0)
    kill: Kill | None = None
    subject: Subject | None = None
    log(f"cell {cell.id}: {cell.why}; kill {TRIGGERS[cell.trigger]}")
    with Sampler(h.observer, h.args.sample_interval) as sampler:
        try:
            a, b = h.volume_nodes()
            log(f"  A={a} (the volume's node), B={b}")
            subject = Subject(h.ctx, h.observer, ns, a, b, h.args.timeout, wffc=cell.wffc)
            h.ctx.kube.delete_namespace(ns)  # an earlier, interrupted run's
            target = h.target(cell.component, a)
            if h.args.fresh_backoff and h.forget_backoff(target):
                log(f"  {target.node}'s kubelet restarted at rest: {target}'s back-off forgotten")
            h.ctx.namespace(ns)
            subject.prepare(cell.phase)
            wait_for(
                f"{target} running before the action",
                lambda: h.killer.is_up(target),
                h.args.back_timeout,
            )
            aimed = h.killer.aim(target)
            init = node_init_pid(subject.a) if cell.trigger == "target-gone" else 0
            subject.act(cell.phase)
            if init and aimed.host_pid:
                result.landed = await_unstage_on_host(subject, init, h.args.timeout)
            else:
                result.landed = await_trigger(subject, cell, h.args.timeout)
            if h.args.delay:
                time.sleep(h.args.delay)
            kill = h.killer.kill(target, aimed)
            log(f"  kill -9 of {target} (pid {kill.pid}), landed {result.landed}")
            result.back_seconds = h.recover(kill)
            log(f"  {target} back after {result.back_seconds:.0f} s")
            wait_for(
                f"the {cell.phase} done: {phase(cell.phase).done}",
                functools.partial(subject.done, cell.phase),
                h.args.timeout,
            )
            result.add(subject.verify(cell.phase))
            result.add(h.observer.agreement(90))
        except (Failed, NotRunning) as e:
            result.outcome, result.detail = "FAILED", str(e)
        except Exception as e:  # one cell's error is its row; the next cells still run
            result.outcome, result.detail = "FAILED", f"{type(e).__name__}: {e}"
            traceback.print_exc()
        if kill is not None and result.outcome != "passed":
            with contextlib.suppress(Exception):  # the next cell needs it back
                h.recover(kill)
        try:
            if subject is not None:
                subject.cleanup()
            else:
                h.ctx.kube.delete_namespace(ns)
            result.add(h.observer.settled(h.before, 120))
        except Exception as e:
            result.outcome = "FAILED"
            result.detail = result.detail or f"cleanup: {e}"
    report = sampler.report
    result.add(report.violations)
    result.samples = report.summary()
    if result.violations and result.outcome == "passed":
        result.outcome = "FAILED"
    result.seconds = time.monotonic() - began
    log(f"cell {cell.id}: {result.outcome} in {result.seconds:.0f} s; samples: {result.samples}")
    for v in result.violations:
        log(f"  VIOLATION {v['kind']}: {v['detail']}")
    if not result.ok:
        with contextlib.suppress(Exception):
            runner.diagnose(h.ctx, ns, h.logs / ns)
    return result
