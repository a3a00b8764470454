"""Running `kubectl csi-hostpath why` as its user would, for experiment q: a ServiceAccount of
the experiment's own bound to the chart's two why-reader roles and nothing else, a kubeconfig
holding that account's token, and the real kubectl finding the plugin (`kubectl-csi_hostpath`,
installed into the venv beside this Python) on PATH. Also the manifests the cases need, and the
words each case's reason line must hold (the dry parts, checked offline by
tests/k8s/experiments/test_experiments_offline.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.k8s.experiments import exp_cbt
from tests.k8s.experiments.context import account_binding, service_account
from tests.k8s.experiments.kube import Failed, Obj

READER = "why-reader"
CHART = "csi-hostpath"  # the chart's name: a release of another name prefixes its objects
UNTIL_DEATH = [
    # Tolerate the node's loss for ever: the pod must still be there, on its node, when the
    # node comes back and fences its volume (the default evicts it after 300 s).
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
]


def fullname(release: str) -> str:
    """The chart's prefix of its objects' names (templates/_helpers.tpl, csi-hostpath.fullname)."""
    return release if release == CHART else f"{release}-{CHART}"


def reader_rbac(ns: str, release: str, driver_ns: str) -> list[Obj]:
    """The experiment's plugin user: a ServiceAccount bound to the chart's ClusterRole and Role
    <fullname>-why-reader, and to nothing else."""
    role = f"{fullname(release)}-why-reader"
    name = f"{ns}-{READER}"
    return [
        service_account(READER, ns),
        account_binding("ClusterRoleBinding", name, role, READER, ns),
        account_binding("RoleBinding", name, role, READER, ns, at=driver_ns),
    ]


def reader_kubeconfig(admin_view: Obj, token: str, ns: str) -> Obj:
    """A kubeconfig for the reader: the admin's cluster (`kubectl config view --raw --minify
    -o json`), the reader's token, the experiment's namespace."""
    cluster = admin_view["clusters"][0]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": READER, "user": {"token": token}}],
        "contexts": [
            {
                "name": READER,
                "context": {"cluster": cluster["name"], "user": READER, "namespace": ns},
            }
        ],
        "current-context": READER,
    }


def plugin_path() -> str:
    """PATH with the venv's bin first: kubectl finds kubectl-csi_hostpath there."""
    exe = Path(sys.executable).parent / "kubectl-csi_hostpath"
    if not exe.is_file():
        raise Failed(f"{exe} is missing: `make install` installs the package's plugin")
    return f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_why(kubectl: str, kubeconfig: Path, target: str, *more: str) -> str:
    """`kubectl csi-hostpath why TARGET` through the real kubectl; its output (failing on a
    non-zero exit, with its error)."""
    done = subprocess.run(
        [kubectl, "csi-hostpath", "why", target, "--kubeconfig", str(kubeconfig), *more],
        env={**os.environ, "PATH": plugin_path()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise Failed(f"kubectl csi-hostpath why {target}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def line_of(output: str, label: str) -> str:
    """The `label: ...` line of the plugin's text output ("" when there is none)."""
    return next(
        (ln[len(label) + 2 :] for ln in output.splitlines() if ln.startswith(f"{label}: ")), ""
    )


def expected(case: str, ns: str, a: str = "", b: str = "", pv: str = "") -> list[str]:
    """The words the reason line of each case must hold, given the names the run made (a: the
    node holding the volume, b: the pod's other node, pv: the PersistentVolume)."""
    return {
        "first-consumer": ["claim late waits for its first consumer", "WaitForFirstConsumer"],
        "no-capacity": ["no node has the capacity asked for", "100Ti"],
        "multi-attach-ledger": [
            "the ledger refuses to attach",
            f"to node {b}",
            f"node {a} holds it for pod {ns}/first",
        ],
        "rwop-conflict": ["claim only is ReadWriteOncePod", f"pod {ns}/one uses it"],
        "holder-gone": [f"node {a}, which holds volume {pv}, is NotReady", f"until {a} lets go"],
        "fenced": [f"node {a} came back after its hold on {pv} was revoked", "fenced the volume"],
        "missing-secret": ["storage is done in all five phases", "Secret late-secret"],
        "healthy": ["nothing blocks", "is Running and Ready on"],
    }[case]


def block_pod(name: str, ns: str, claim: str, node: str) -> Obj:
    """A pod holding the claim as a raw device (experiment m's), on that node."""
    held = exp_cbt.block_pod(name, ns, claim)
    held["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return held


def shadow(original: Obj, name: str, ns: str, claim: str) -> list[Obj]:
    """A second PersistentVolume naming the original's volume (its handle), ReadWriteMany, and
    the claim bound to it. Kubernetes lets an RWX volume attach on many nodes, so only the
    driver's ledger stands between the second node and the first's hold. Retain: deleting it
    never deletes the volume."""
    spec = original["spec"]
    pv_spec: Obj = {
        "accessModes": ["ReadWriteMany"],
        "capacity": dict(spec["capacity"]),
        "csi": dict(spec["csi"]),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "volumeMode": spec.get("volumeMode", "Filesystem"),
        "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": claim},
    }
    if spec.get("nodeAffinity"):
        pv_spec["nodeAffinity"] = spec["nodeAffinity"]
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"e2e": ns}},
            "spec": pv_spec,
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": spec["capacity"]["storage"]}},
                "storageClassName": "",
                "volumeMode": pv_spec["volumeMode"],
                "volumeName": name,
            },
        },
    ]


def as_json(text: str) -> Obj:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise Failed(f"`-o json` did not print JSON: {text[:200]}") from e
    if not isinstance(doc, dict):
        raise Failed("`-o json` printed no object")
    return doc
