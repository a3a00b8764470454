"""Faults in a running kind cluster: kill -9 of each component in each phase of a volume's life, a
worker partitioned, powered off or rebooted under a writing pod, and a seeded chaos run.

    python -m tests.k8s.faults --list [--chaos MINUTES --seed N]     touches nothing
    python -m tests.k8s.faults --kubeconfig FILE [--cells SPEC]
    python -m tests.k8s.faults --kubeconfig FILE --partition partition,poweroff,reboot
    python -m tests.k8s.faults --kubeconfig FILE --chaos MINUTES --seed N

With neither --cells, --partition nor --chaos it runs every cell (--cells all). The chart is
installed as `python -m tests.k8s.experiments` installs it unless the release is there. Every
result goes to a table, a grid of the matrix and --results (JSON, rewritten after each row).
Exit 0 only when everything run passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from tests.k8s.experiments.context import log
from tests.k8s.experiments.kube import Kube
from tests.k8s.experiments.nodes import REPO
from tests.k8s.faults import matrix, results
from tests.k8s.faults.schedule import plan, slots

MODES = ("partition", "poweroff", "reboot")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.k8s.faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--list", action="store_true", help="print the matrix (and a chaos plan) only")
    p.add_argument("--kubeconfig", type=Path, help="the cluster's kubeconfig (or KUBECONFIG)")
    p.add_argument("--cells", help="COMPONENT/PHASE[,...] ('*' either side; 'all'); see --list")
    p.add_argument("--partition", help=f"cases to run: {','.join(MODES)} or all")
    p.add_argument("--chaos", type=float, metavar="MINUTES", help="a chaos run this long")
    p.add_argument("--seed", type=int, help="the chaos run's seed (replay: the same seed)")
    p.add_argument(
        "--fault-interval",
        type=float,
        default=5.0,
        help="mean seconds between the chaos run's faults (default %(default)g)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=3,
        help="claims' lifecycles at a time in the chaos run (default %(default)d)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300,
        help="seconds one step may take before the row fails naming it (%(default)g)",
    )
    p.add_argument(
        "--back-timeout",
        type=float,
        default=420,
        help="seconds a killed component may take to run again: the kubelet's restart "
        "back-off reaches 300 (default %(default)g)",
    )
    p.add_argument(
        "--fresh-backoff",
        action="store_true",
        help="before each cell, restart at rest the kubelet that restarts its target, so the "
        "kill meets a first crash's back-off (10 s), not one the run's earlier kills grew",
    )
    p.add_argument("--delay", type=float, default=0.0, help="seconds from the trigger to the kill")
    p.add_argument(
        "--sample-interval",
        type=float,
        default=1.0,
        help="seconds between the sampler's rounds (default %(default)g)",
    )
    p.add_argument("--results", type=Path, help="the JSON results (default .run/faults/...)")
    p.add_argument("--docker-host", help="default: DOCKER_HOST, else tools/kind/docker.sh env")
    p.add_argument("--kubectl", help="kubectl to use (default: on PATH)")
    p.add_argument("--helm", help="helm to use, if the chart must be installed (default: on PATH)")
    p.add_argument(
        "--pool-dir",
        type=Path,
        default=Path("/var/lib/csi-hostpath-kind/pool"),
        help="the shared pool as the host sees it (default %(default)s)",
    )
    p.add_argument(
        "--ledger-state-dir",
        type=Path,
        help="read the ledger on the host from this controller state directory (e.g. "
        "/var/lib/csi-hostpath-kind/controller) instead of in the controller pod: "
        "it stays readable while the API server or the controller is down",
    )
    p.add_argument("--snapshot-crds", type=Path)
    p.add_argument("--snapshot-controller", type=Path)
    p.add_argument("--snapshot-metadata-crds", type=Path)
    p.add_argument("--release", default="csi-hostpath")
    p.add_argument("--namespace", default="csi-hostpath")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="chart values, if the chart must be installed",
    )
    args = p.parse_args(argv)
    if args.chaos is not None and (args.seed is None or args.chaos <= 0):
        p.error("--chaos MINUTES needs --seed N (and MINUTES above 0): a run must be replayable")
    try:
        args.selected = (
            matrix.select(args.cells or "")
            if args.cells or not (args.partition or args.chaos)
            else []
        )
    except ValueError as e:
        p.error(f"--cells: {e}")
    args.modes = _modes(p, args.partition)
    if args.list:
        return args
    if args.kubeconfig is None:
        env = os.environ.get("KUBECONFIG")
        if not env:
            p.error("--kubeconfig FILE (or KUBECONFIG) is needed")
        args.kubeconfig = Path(env)
    if args.results is None:
        args.results = REPO / ".run" / "faults" / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    return args


def _modes(p: argparse.ArgumentParser, spec: str | None) -> list[str]:
    if not spec:
        return []
    if spec == "all":
        return list(MODES)
    modes = [m.strip() for m in spec.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"--partition: no case {', '.join(bad)} (known: {', '.join(MODES)})")
    return modes


def listing(args: argparse.Namespace) -> str:
    from tests.k8s.faults.partition import MODES as CASES

    text = [matrix.describe(), "", "partition cases (--partition):"]
    text += [f"  {m:<10} {why}" for m, why in CASES.items()]
    text += ["", f"chaos targets ({len(slots())} component@role):"]
    text += ["  " + ", ".join(f"{c}@{r}" for c, r in slots())]
    if args.chaos is not None:
        pl = plan(args.seed, args.chaos, args.fault_interval)
        text += [
            "",
            f"chaos plan, seed {args.seed}: {len(pl.ticks)} ticks in {args.chaos:g} min;"
            " the first ten (seconds, first target tried):",
        ]
        text += [f"  {t.at:7.1f}  {t.order[0][0]}@{t.order[0][1]}" for t in pl.ticks[:10]]
        text += [
            "  lifecycles: "
            + ", ".join(f"{s.kind}{'+move' if s.move else ''}" for s in pl.lifecycles[:10])
            + ", ..."
        ]
    if args.cells:
        text += [
            "",
            f"selected: {len(args.selected)} cells: " + ", ".join(c.id for c in args.selected),
        ]
    return "\n".join(text)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        print(listing(args))
        return 0
    from tests.k8s.faults.cellrun import run_cell
    from tests.k8s.faults.chaos import Chaos
    from tests.k8s.faults.harness import setup
    from tests.k8s.faults.partition import Case

    signal.signal(signal.SIGTERM, _stop)
    rows: list[results.CellResult] = []
    extra: dict[str, object] = {"argv": list(sys.argv[1:] if argv is None else argv)}
    ok = True
    stopped = ""
    kube: Kube | None = None
    try:
        kube = Kube(args.kubeconfig, args.kubectl or "kubectl")
        h = setup(args, kube)
        todo = [c.id for c in args.selected] + [f"partition/{m}" for m in args.modes]
        log(
            f"to run: {len(todo)} rows{'' if args.chaos is None else ' and a chaos run'}; "
            f"results in {args.results}"
        )
        for cell in args.selected:
            rows.append(run_cell(h, cell))
            results.write(args.results, rows, extra)
        for mode in args.modes:
            rows.append(Case(h, mode).run())
            results.write(args.results, rows, extra)
        if args.chaos is not None:
            pl = plan(args.seed, args.chaos, args.fault_interval)
            report = Chaos(h, pl, args.concurrency).run()
            extra["chaos"] = report.as_json()
            extra["plan"] = pl.as_json()
            results.write(args.results, rows, extra)
            print(report.render())
            ok = report.ok
    except (Exception, SystemExit, KeyboardInterrupt) as e:
        stopped = f"{type(e).__name__}: {e}"
        log(f"stopped: {stopped}")
        ok = False
    finally:
        if kube is not None:
            kube.close()
    done = {r.id for r in rows}
    rows += [
        results.CellResult(i, "skipped", 0.0, detail=f"not reached: {stopped}")
        for i in [c.id for c in args.selected] + [f"partition/{m}" for m in args.modes]
        if i not in done
    ]
    results.write(args.results, rows, extra)
    if rows:
        print(results.render(rows))
        print()
        print(results.grid(rows))
    print(f"results: {args.results}")
    return 0 if ok and all(r.ok for r in rows) else 1
