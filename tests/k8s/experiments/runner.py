"""The experiments on a running kind cluster (make kind-up's, or make kind-e2e, which brings one up
and down around them): install the snapshot support and the chart, run the experiments, print
the table.

    python -m tests.k8s.experiments [--kubeconfig FILE] [--only LETTERS] [--skip LETTERS] ...

The kubeconfig is --kubeconfig, else KUBECONFIG, else the one make kind-up writes
(.run/kind/$KIND_CLUSTER/kubeconfig). Exit 0 only when every selected experiment passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from tests.k8s.experiments import (  # noqa: F401  (they register)
    exp_access,
    exp_cbt,
    exp_data,
    exp_kernel,
    exp_limits,
    exp_nodes,
    exp_pool,
    exp_topology,
    exp_why,
)
from tests.k8s.experiments.chart import Installer
from tests.k8s.experiments.context import REGISTRY, Ctx, log
from tests.k8s.experiments.kube import Failed, Kube
from tests.k8s.experiments.nodes import REPO, Nodes
from tests.k8s.experiments.table import Result, all_passed, render

# The order they run in: the shared shape's first, the node-loss ones late (they take a node
# away), the uninstall after them, then the local shape's.
ORDER = "abcdfghimnkpeqloj"
TOOLS = REPO / "tools" / "cluster"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.k8s.experiments",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", default="", help="run only these experiments (letters, e.g. abc)")
    p.add_argument("--skip", default="", help="skip these experiments (letters)")
    p.add_argument("--list", action="store_true", help="print the experiments and exit")
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster's kubeconfig (default: KUBECONFIG, else make kind-up's)",
    )
    p.add_argument(
        "--kubectl",
        help="kubectl to use (default: the pinned build, tools/cluster/build.sh path kubectl)",
    )
    p.add_argument(
        "--helm", help="helm to use (default: the pinned build, tools/cluster/build.sh path helm)"
    )
    p.add_argument(
        "--pool-dir",
        type=Path,
        default=Path("/var/lib/csi-hostpath-kind/pool"),
        help="the shared pool as the host sees it (default: %(default)s, make kind-up's)",
    )
    p.add_argument(
        "--snapshot-crds",
        type=Path,
        help="directory of the snapshot CRDs (default: the pinned build's)",
    )
    p.add_argument(
        "--snapshot-controller", type=Path, help="directory of the snapshot-controller manifests"
    )
    p.add_argument(
        "--snapshot-metadata-crds",
        type=Path,
        help="directory of the SnapshotMetadataService CRD (default: the pinned build's)",
    )
    p.add_argument("--release", default="csi-hostpath")
    p.add_argument("--namespace", default="csi-hostpath")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="more chart values"
    )
    args = p.parse_args(argv)
    if args.kubeconfig is None:
        kind = REPO / ".run" / "kind" / (os.environ.get("KIND_CLUSTER") or "csi-hostpath")
        args.kubeconfig = Path(os.environ.get("KUBECONFIG") or kind / "kubeconfig")
    for flag in ("only", "skip"):
        bad = sorted(set(getattr(args, flag)) - set(ORDER))
        if bad:
            p.error(f"--{flag}: no experiment {''.join(bad)} (known: {''.join(sorted(ORDER))})")
    return args


def selected(args: argparse.Namespace) -> list[str]:
    return [x for x in ORDER if (not args.only or x in args.only) and x not in args.skip]


def _tool(*argv: str, env: dict[str, str] | None = None, capture: bool = True) -> str:
    done = subprocess.run(
        list(argv),
        capture_output=capture,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise Failed(
            f"{' '.join(argv[:3])} failed (exit {done.returncode}): "
            f"{(done.stderr or '').strip()[-800:]}"
        )
    return done.stdout if capture else ""


def built(name: str) -> str:
    return _tool("bash", str(TOOLS / "build.sh"), "path", name).strip()


def workers(kube: Kube) -> list[str]:
    """The nodes pods may be scheduled on: Ready, without the control plane's NoSchedule taint."""
    names = []
    for n in kube.objects("v1", "Node"):
        taints = [
            t.get("key")
            for t in (n.get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoSchedule"
        ]
        if "node-role.kubernetes.io/control-plane" not in taints:
            names.append(str(n["metadata"]["name"]))
    return sorted(names)


def diagnose(ctx: Ctx, letter: str, out: Path) -> None:
    """What a person would look at after a failure, saved beside the cluster's logs."""
    out.mkdir(parents=True, exist_ok=True)
    k = ctx.kube
    views = {
        "pods.txt": ["get", "pods", "-A", "-o", "wide"],
        "events.txt": ["get", "events", "-A", "--sort-by=.lastTimestamp"],
        "pv-pvc-va.txt": ["get", "pv,pvc,volumeattachment", "-A", "-o", "wide"],
    }
    for f, argv in views.items():
        (out / f).write_text(k.kubectl(*argv, check=False))
    for p in ctx.driver_pods("controller") + ctx.driver_pods("node"):
        name = p["metadata"]["name"]
        (out / f"{name}.log").write_text(
            k.kubectl(
                "-n", ctx.driver_ns, "logs", name, "-c", "csi-hostpath", "--tail=300", check=False
            )
        )
    log(f"experiment {letter}: what the cluster showed is in {out}")


def run(args: argparse.Namespace, kube: Kube, nodes: Nodes, logs: Path) -> list[Result]:
    helm = args.helm or built("helm")
    installer = Installer(
        kube,
        helm,
        REPO / "charts" / "csi-hostpath",
        args.release,
        args.namespace,
        [a for kv in args.set for a in ("--set", kv)],
    )
    ctx = Ctx(kube, nodes, args.release, args.namespace, workers(kube))
    ctx.install = lambda shape: installer.install(shape, ctx.workers)
    ctx.uninstall = lambda: installer.uninstall(ctx)
    log(f"workers: {', '.join(ctx.workers)}")
    results: list[Result] = []
    todo = selected(args)
    installer.snapshot_support(
        args.snapshot_crds or Path(built("snapshot-crds")),
        args.snapshot_controller or Path(built("snapshot-controller-manifests")),
        args.snapshot_metadata_crds or Path(built("snapshot-metadata-crds")),
    )
    for letter in todo:
        exp = REGISTRY[letter]
        start = time.monotonic()
        try:
            if installer.shape != exp.shape.replace("uninstall", "shared"):
                if installer.shape:
                    installer.uninstall(ctx)
                installer.install(exp.shape, ctx.workers)
            log(f"experiment {letter}: {exp.title}")
            exp.run(ctx)
            outcome, detail = "passed", ""
        except Exception as e:  # one experiment's failure is its row; the others still run
            outcome, detail = (
                "FAILED",
                f"{type(e).__name__}: {e}" if not isinstance(e, Failed) else str(e),
            )
            log(f"experiment {letter} FAILED: {detail}")
            if not isinstance(e, Failed):
                traceback.print_exc()
            try:
                diagnose(ctx, letter, logs / letter)
            except Exception as d:
                log(f"  (diagnostics failed too: {d})")
        try:
            kube.delete_namespace(f"e2e-{letter}")
        except Exception as e:
            if outcome == "passed":
                outcome, detail = "FAILED", f"cleanup: {e}"
        results.append(Result(letter, exp.title, outcome, time.monotonic() - start, detail))
        log(f"experiment {letter}: {outcome} in {results[-1].seconds:.0f} s")
    if installer.shape:
        installer.uninstall(ctx)
    return results


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for x in sorted(ORDER):
            print(f"{x}  {REGISTRY[x].title}")
        return 0
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    results: list[Result] = []
    setup_error = ""
    try:
        logs = REPO / ".run" / "e2e-logs"
        nodes = Nodes(args.pool_dir)
        kube = Kube(args.kubeconfig, args.kubectl or built("kubectl"))
        try:
            results = run(args, kube, nodes, logs)
        finally:
            kube.close()
    except (Exception, SystemExit, KeyboardInterrupt) as e:
        setup_error = f"{type(e).__name__}: {e}"
        log(f"stopped: {setup_error}")
        if not isinstance(e, Failed | SystemExit | KeyboardInterrupt):
            traceback.print_exc()
    done = {r.letter for r in results}
    results += [
        Result(x, REGISTRY[x].title, "skipped", 0.0, f"not reached: {setup_error}")
        for x in selected(args)
        if x not in done
    ]
    print(render(results))
    print(f"experiments: {time.monotonic() - began:.0f} s in all")
    return 0 if all_passed(results) and not setup_error else 1
