"""`make cluster-e2e`: build what is missing, bring the cluster up, install the snapshot support and
the chart, run the experiments, print the table, bring the cluster down (on failure too).

    python -m tests.k8s.experiments [--only LETTERS] [--skip LETTERS] [--keep] [--no-build]
    python -m tests.k8s.experiments --kubeconfig FILE --no-cluster [--kind] ...   any other cluster

Exit 0 only when every selected experiment passed and the teardown left nothing behind.
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
from tests.k8s.experiments.nodes import REPO, KindNodes, Nodes
from tests.k8s.experiments.table import Result, all_passed, render

# The order they run in: the shared shape's first, the node-loss ones late (they take a node
# away), the uninstall after them, then the local shape's.
ORDER = "abcdfghimnkpeqloj"
TOOLS = REPO / "tools" / "cluster"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="cluster-e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", default="", help="run only these experiments (letters, e.g. abc)")
    p.add_argument("--skip", default="", help="skip these experiments (letters)")
    p.add_argument("--list", action="store_true", help="print the experiments and exit")
    p.add_argument(
        "--cluster-name",
        default=os.environ.get("CLUSTER_NAME") or "csi-hostpath",
        help="the cluster from binaries to bring up and down (CLUSTER_NAME)",
    )
    p.add_argument(
        "--kubeconfig", type=Path, help="the cluster's kubeconfig (default: the one up.sh writes)"
    )
    p.add_argument(
        "--no-cluster",
        action="store_true",
        help="use --kubeconfig as it is: no build, no up, no down",
    )
    p.add_argument(
        "--kind",
        action="store_true",
        help="the nodes are kind's containers (docker exec); implies --no-cluster",
    )
    p.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    p.add_argument(
        "--no-build",
        action="store_true",
        help="don't build programs or images (use what is cached)",
    )
    p.add_argument(
        "--kubectl",
        help="kubectl to use (default: the pinned build; kubectl on PATH with --no-cluster)",
    )
    p.add_argument(
        "--helm", help="helm to use (default: the pinned build; helm on PATH with --no-cluster)"
    )
    p.add_argument("--pool-dir", type=Path, help="the shared pool as the host sees it")
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
    if args.kind:
        args.no_cluster = True
    if args.no_cluster and args.kubeconfig is None:
        env = os.environ.get("KUBECONFIG")
        if not env:
            p.error("--no-cluster needs --kubeconfig FILE (or KUBECONFIG)")
        args.kubeconfig = Path(env)
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


def settings(env: dict[str, str]) -> dict[str, str]:
    out = _tool("bash", str(TOOLS / "up.sh"), "--settings", env=env)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class Cluster:
    """The cluster from binaries of one name: up, down."""

    def __init__(self, name: str) -> None:
        self.env = {**os.environ, "CLUSTER_NAME": name}
        self.name = name

    def up(self) -> Path:
        log(f"bringing up the cluster {self.name}")
        _tool("bash", str(TOOLS / "up.sh"), env=self.env, capture=False)
        return Path(settings(self.env)["KUBECONFIG"])

    def down(self) -> bool:
        log(f"bringing down the cluster {self.name}")
        done = subprocess.run(
            ["bash", str(TOOLS / "down.sh")], env=self.env, stdin=subprocess.DEVNULL, check=False
        )
        return done.returncode == 0


def build(args: argparse.Namespace) -> None:
    log("building what is missing (tools/cluster/build.sh all, images.sh build)")
    _tool("bash", str(TOOLS / "build.sh"), "all", capture=False)
    _tool("bash", str(TOOLS / "images.sh"), "build", capture=False)


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
    helm = args.helm or ("helm" if args.no_cluster else built("helm"))
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
    cluster = None if args.no_cluster else Cluster(args.cluster_name)
    results: list[Result] = []
    setup_error = ""
    down_ok = True
    try:
        if cluster is not None:
            if not args.no_build:
                build(args)
            kubeconfig = cluster.up()
            st = settings(cluster.env)
            pool = args.pool_dir or Path(st["CLUSTER_ROOT"]) / "shared" / "pool"
            logs = Path(st["CLUSTER_RUN"]) / "logs" / "e2e"
            nodes: Nodes = Nodes(cluster.name, pool)
        else:
            kubeconfig = args.kubeconfig
            pool = args.pool_dir or Path("/var/lib/csi-hostpath-kind/pool")
            logs = REPO / ".run" / "e2e-logs"
            nodes = KindNodes("", pool) if args.kind else Nodes(args.cluster_name, pool)
        kube = Kube(
            kubeconfig, args.kubectl or ("kubectl" if args.no_cluster else built("kubectl"))
        )
        try:
            results = run(args, kube, nodes, logs)
        finally:
            kube.close()
    except (Exception, SystemExit, KeyboardInterrupt) as e:
        setup_error = f"{type(e).__name__}: {e}"
        log(f"stopped: {setup_error}")
        if not isinstance(e, Failed | SystemExit | KeyboardInterrupt):
            traceback.print_exc()
    finally:
        if cluster is not None and not args.keep:
            down_ok = cluster.down()
    done = {r.letter for r in results}
    results += [
        Result(x, REGISTRY[x].title, "skipped", 0.0, f"not reached: {setup_error}")
        for x in selected(args)
        if x not in done
    ]
    print(render(results))
    print(
        f"cluster-e2e: {time.monotonic() - began:.0f} s in all"
        + ("" if down_ok else "; the teardown left something behind (see above)")
    )
    return 0 if all_passed(results) and down_ok and not setup_error else 1
