"""What every experiment is given (the cluster, its nodes, the release), the registry the
experiment modules fill with @experiment, and the small manifest builders they share."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.k8s.experiments.kube import Failed, Kube, Obj, condition
from tests.k8s.experiments.nodes import Nodes

# The chart's defaults (charts/csi-hostpath/values.yaml).
DRIVER = "loop.hostpath.csi.dev"
IMMEDIATE = "csi-hostpath"
WFFC = "csi-hostpath-wffc"
SNAPCLASS = "csi-hostpath-snapclass"
GROUPSNAPCLASS = "csi-hostpath-groupsnapclass"
THROTTLED = "csi-hostpath-throttled"
CONTROLLER_STATE = "/var/lib/csi-hostpath/controller"
POOL = "/var/lib/csi-hostpath/pool"
BUSYBOX = "busybox:1.37.0"
SNAP_API = "snapshot.storage.k8s.io/v1"
GROUP_API = "groupsnapshot.storage.k8s.io/v1beta2"


def audit_rows(table: str) -> list[list[str]]:
    """`ledger audit`'s table, its rows split into columns: when (date time), actor, action,
    volume, node, generation, name, reason (the rest of the line, maybe empty)."""
    rows = []
    for line in table.splitlines()[1:]:
        parts = line.split(None, 8)
        if len(parts) >= 8:
            rows.append([f"{parts[0]} {parts[1]}", *parts[2:8], " ".join(parts[8:])])
    return rows


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} e2e: {message}", file=sys.stderr, flush=True)


@dataclass
class Ctx:
    kube: Kube
    nodes: Nodes
    # The release: its name and namespace (the chart's objects are named after it).
    release: str
    driver_ns: str
    # The nodes pods may run on, sorted.
    workers: list[str] = field(default_factory=list)
    # The chart, (re)installed in a pool shape and uninstalled (by the runner's Installer).
    install: Callable[[str], None] = lambda shape: None
    uninstall: Callable[[], None] = lambda: None

    def driver_pods(self, component: str) -> list[Obj]:
        return self.kube.objects(
            "v1",
            "Pod",
            self.driver_ns,
            labels=f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component={component}",
        )

    def controller_pod(self) -> Obj:
        pods = [
            p
            for p in self.driver_pods("controller")
            if p["metadata"].get("deletionTimestamp") is None
        ]
        if not pods:
            raise Failed("no controller pod of the release")
        return pods[0]

    def node_plugin(self, node: str) -> Obj:
        for p in self.driver_pods("node"):
            if (p.get("spec") or {}).get("nodeName") == node and p["metadata"].get(
                "deletionTimestamp"
            ) is None:
                return p
        raise Failed(f"no node plugin pod on {node}")

    def node_ready(self, node: str) -> bool:
        c = condition(self.kube.get("v1", "Node", node), "Ready")
        return c is not None and c.get("status") == "True"

    def take_node_away(self, node: str) -> None:
        """Stop the node's kubelet and SIGKILL its node plugin: gone, as the control plane and
        the ledger see it, while its pods' processes go on."""
        plugin = self.node_plugin(node)
        cid = next(
            s["containerID"]
            for s in plugin["status"]["containerStatuses"]
            if s["name"] == "csi-hostpath"
        )
        self.nodes.stop_kubelet(node)
        self.nodes.kill_container(node, cid)

    def ledger(self, *args: str) -> str:
        """The driver's own ledger CLI, in the controller pod, on the controller's state."""
        pod = self.controller_pod()["metadata"]["name"]
        return self.kube.exec(
            self.driver_ns,
            pod,
            ["csi-hostpath", "ledger", *args, "--state-dir", CONTROLLER_STATE, "--pool-dir", POOL],
            container="csi-hostpath",
        )

    def audit(self, volume: str) -> list[list[str]]:
        return audit_rows(self.ledger("audit", "--volume", volume))

    def other(self, node: str) -> str:
        rest = [w for w in self.workers if w != node]
        if not rest:
            raise Failed(f"no worker besides {node}")
        return rest[0]

    def namespace(self, name: str) -> str:
        self.kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
        return name


@dataclass(frozen=True)
class Experiment:
    letter: str
    title: str
    run: Callable[[Ctx], None]
    # Which install it needs: the shared pool shape, the local one, or the shared one that it
    # ends itself (helm uninstall).
    shape: str = "shared"


REGISTRY: dict[str, Experiment] = {}


def experiment(
    letter: str, title: str, shape: str = "shared"
) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        if letter in REGISTRY:
            raise ValueError(f"experiment {letter} registered twice")
        REGISTRY[letter] = Experiment(letter, title, fn, shape)
        return fn

    return register


def pvc(
    name: str,
    ns: str,
    size: str = "64Mi",
    sc: str = IMMEDIATE,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **spec: Any,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "storageClassName": sc,
            "accessModes": list(modes),
            "resources": {"requests": {"storage": size}},
            **spec,
        },
    }


def pod(
    name: str,
    ns: str,
    claim: str,
    script: str,
    node: str | None = None,
    volumes: list[Obj] | None = None,
    mounts: list[Obj] | None = None,
) -> Obj:
    """A busybox pod running `sh -c script`, the claim at /data, on `node` if one is named."""
    spec: Obj = {
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "app",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}, *(mounts or [])],
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
            *(volumes or []),
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def service_account(name: str, ns: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }


def account_binding(kind: str, name: str, role: str, account: str, ns: str, at: str = "") -> Obj:
    """A ClusterRoleBinding (or, with `at`, a RoleBinding in that namespace) of role (a
    ClusterRole, or a Role) to the ServiceAccount ns/account."""
    meta: Obj = {"name": name, **({"namespace": at} if at else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind.removesuffix("Binding"),
            "name": role,
        },
    }


def expect(what: str, ok: bool, seen: object = "") -> None:
    if not ok:
        raise Failed(f"{what}: not so" + (f" (seen: {seen})" if seen != "" else ""))
    log(f"  ok: {what}")
