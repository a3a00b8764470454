"""The run's shared parts, set up once against a running kind cluster: Docker's address, the API
client, the chart installed the way `python -m tests.k8s.experiments` installs it (unless the
release is there already), the nodes' roles, the pool's files at the start, and how a killed
component is waited for until it runs and answers again."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.k8s.experiments import runner
from tests.k8s.experiments.chart import Installer
from tests.k8s.experiments.context import IMMEDIATE, Ctx, log
from tests.k8s.experiments.kube import Failed, Kube, pod_ready
from tests.k8s.experiments.nodes import REPO, Nodes, _run
from tests.k8s.faults.killer import Kill, Killer, Target
from tests.k8s.faults.matrix import component
from tests.k8s.faults.observe import Observer, wait_for
from tests.k8s.faults.phases import XFS_CLASS

DOCKER_SH = REPO / "tools" / "kind" / "docker.sh"


def docker_host(explicit: str | None) -> str:
    """--docker-host, else DOCKER_HOST, else what `tools/kind/docker.sh env` prints: the
    project's dockerd when it runs (unix:///run/csi-hostpath-docker/docker.sock), else the
    machine's. That command only looks; it starts nothing."""
    if explicit:
        return explicit
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    try:
        line = _run(["bash", str(DOCKER_SH), "env"], timeout=60).strip()
    except subprocess.CalledProcessError as e:
        raise Failed(f"no Docker answers: {(e.stderr or '').strip()}") from e
    if not line.startswith("DOCKER_HOST="):
        raise Failed(f"tools/kind/docker.sh env printed {line!r}")
    return line.split("=", 1)[1]


def docker(*args: str, timeout: float = 120) -> str:
    """The docker CLI against DOCKER_HOST (set by setup)."""
    try:
        return _run(["docker", *args], timeout=timeout)
    except subprocess.CalledProcessError as e:
        why = (e.stderr or e.stdout or "").strip()[-400:]
        raise Failed(f"docker {' '.join(args[:3])}: {why}") from e


def lease_renewed_since(lease: dict[str, Any] | None, since: float) -> bool:
    """The node's Lease was renewed after `since` (time.time()): its kubelet talks to the API
    server again. The kind nodes share the host's clock."""
    renew = ((lease or {}).get("spec") or {}).get("renewTime")
    if not renew:
        return False
    at = datetime.fromisoformat(str(renew).replace("Z", "+00:00")).timestamp()
    return at > since


def node_init_pid(node: str) -> int:
    """The kind node container's init, as the host numbers it (0 when it is not running)."""
    return int(docker("inspect", "-f", "{{.State.Pid}}", node, timeout=30).strip() or 0)


@dataclass
class Harness:
    args: argparse.Namespace
    ctx: Ctx
    observer: Observer
    killer: Killer
    control_plane: str
    # The pool's volume and snapshot files before the run: an earlier run's Retain volume is
    # not this run's leak.
    before: dict[str, set[str]]
    logs: Path
    _pods: dict[tuple[str, str], str] = field(default_factory=dict)

    def pod_prefix(self, role: str, node: str) -> str:
        """The release's pod of that role on that node (the controller's wherever it runs),
        remembered: the fault thread may ask while the API server is down."""
        key = (role, "" if role == "controller" else node)
        if key not in self._pods:
            p = self.ctx.controller_pod() if role == "controller" else self.ctx.node_plugin(node)
            self._pods[key] = str(p["metadata"]["name"])
        return self._pods[key]

    def forget_pods(self) -> None:
        """A node that was away may come back with another plugin pod."""
        self._pods.clear()

    def controller_node(self) -> str:
        return str(self.ctx.controller_pod()["spec"]["nodeName"])

    def volume_nodes(self) -> tuple[str, str]:
        """(A, B): A runs the cell's pod and is not the controller's node, so a fault of A's
        leaves the ledger reachable; B is the other worker."""
        b = self.controller_node()
        return self.ctx.other(b), b

    def target(self, name: str, a: str) -> Target:
        where = component(name).where
        if where == "control-plane":
            return Target(name, self.control_plane)
        if where == "controller-node":
            return Target(name, self.controller_node())
        return Target(name, a)

    def forget_backoff(self, target: Target) -> bool:
        """Restart, at rest, the kubelet that restarts `target`, so the cell's kill meets the
        back-off of a first crash (10 s), not one grown by the run's earlier kills of the same
        container (doubling to 300 s). The kubelet keeps that back-off in memory only, and forgets
        it by itself once a container has run for ten minutes; a restart forgets it at once and
        leaves running containers alone. systemd's units have no growing back-off: False."""
        if component(target.component).kind == "unit":
            return False
        restarted = time.time()
        self.ctx.nodes.exec(target.node, ["systemctl", "restart", "kubelet"], 60)

        def renewed() -> bool:
            lease = self.ctx.kube.get(
                "coordination.k8s.io/v1", "Lease", target.node, "kube-node-lease"
            )
            return lease_renewed_since(lease, restarted)

        limit = self.args.back_timeout
        wait_for(
            f"the kubelet of {target.node} renewing its lease after its restart", renewed, limit
        )
        wait_for(f"{target.node} Ready", lambda: self.ctx.node_ready(target.node), limit, 2)
        return True

    def api_ready(self) -> bool:
        return self.ctx.kube.kubectl("get", "--raw", "/readyz", timeout=15).strip() == "ok"

    def recover(self, kill: Kill) -> float:
        """Wait until the killed component runs again and answers; the seconds since the kill."""
        t = kill.target
        limit = self.args.back_timeout
        wait_for(f"{t} running again after kill -9", lambda: self.killer.came_back(kill), limit)
        wait_for("the API server ready (/readyz)", self.api_ready, limit)
        comp = component(t.component)
        if t.component == "kubelet":
            wait_for(f"{t.node} Ready", lambda: self.ctx.node_ready(t.node), limit, 2)
        elif comp.kind == "container":

            def ready() -> bool:
                p = (
                    self.ctx.controller_pod()
                    if comp.pod == "controller"
                    else self.ctx.node_plugin(t.node)
                )
                return pod_ready(p)

            wait_for(f"the release's {comp.pod} pod on {t.node} Ready", ready, limit, 2)
        return time.time() - kill.at


def setup(args: argparse.Namespace, kube: Kube) -> Harness:
    os.environ["DOCKER_HOST"] = docker_host(args.docker_host)
    log(f"docker: DOCKER_HOST={os.environ['DOCKER_HOST']}")
    nodes = Nodes(args.pool_dir)
    workers = runner.workers(kube)
    every = sorted(str(n["metadata"]["name"]) for n in kube.objects("v1", "Node"))
    planes = [n for n in every if n not in workers]
    if len(planes) != 1 or len(workers) < 2:
        raise Failed(f"need one control plane and two workers; nodes: {every}")
    ctx = Ctx(kube, nodes, args.release, args.namespace, workers)
    if not ctx.driver_pods("controller"):
        installer = Installer(
            kube,
            args.helm or "helm",
            REPO / "charts" / "csi-hostpath",
            args.release,
            args.namespace,
            [a for kv in args.set for a in ("--set", kv)],
        )
        installer.snapshot_support(
            args.snapshot_crds or Path(runner.built("snapshot-crds")),
            args.snapshot_controller or Path(runner.built("snapshot-controller-manifests")),
            args.snapshot_metadata_crds or Path(runner.built("snapshot-metadata-crds")),
        )
        installer.install("shared", workers)
    else:
        log(f"release {args.release} found in {args.namespace}: used as it is")
    cls = kube.get("storage.k8s.io/v1", "StorageClass", IMMEDIATE) or {}
    params = {**(cls.get("parameters") or {}), "csi.storage.k8s.io/fstype": "xfs"}
    kube.apply(
        [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": XFS_CLASS},
                "provisioner": cls.get("provisioner"),
                "parameters": params,
                "allowVolumeExpansion": True,
            }
        ]
    )
    observer = Observer(
        kube, nodes, every, args.namespace, args.release, args.pool_dir, args.ledger_state_dir
    )
    h = Harness(
        args,
        ctx,
        observer,
        Killer(nodes, args.namespace, lambda r, n: "", node_init_pid),
        planes[0],
        observer.pool_files(),
        args.results.parent / "logs",
    )
    h.killer.pod_prefix = h.pod_prefix
    found = observer.at_rest(h.before)
    observer.known = {v.detail for v in found}
    for v in found:
        log(f"already there before the run (not held against it): {v.kind}: {v.detail}")
    log(
        f"control plane {h.control_plane}; workers {', '.join(workers)}; "
        f"controller on {h.controller_node()}"
    )
    return h
