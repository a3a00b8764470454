"""o: snapshot topology in the local shape. A snapshot lives in the pool of the node that cut it
(its handle ends in @NODE); a claim restored from it, whose pod names no node, ends up on that node:
a provisioner on another node answers RESOURCE_EXHAUSTED, external-provisioner drops the selected
node, and the scheduler picks again.

The local shape's snapshots are cut by a snapshotter on each node (--node-deployment), which only
takes the contents the snapshot-controller marks for its node; the controller does that only with
--enable-distributed-snapshotting, and then reads the nodes (a rule its v8.7.0 RBAC leaves
commented out). Both are given for this experiment and taken back after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from tests.k8s.experiments.context import SNAP_API, WFFC, Ctx, expect, experiment, log, pod, pvc
from tests.k8s.experiments.exp_data import WRITE_BLOB, _ready, _snapshot, _sum
from tests.k8s.experiments.kube import Obj, until

DISTRIBUTED = "--enable-distributed-snapshotting"
NODES_RULE = "e2e-o-snapshot-controller-nodes"


def nodes_rbac() -> list[Obj]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NODES_RULE},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NODES_RULE},
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": "snapshot-controller",
                    "namespace": "kube-system",
                }
            ],
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": NODES_RULE,
            },
        },
    ]


def _controller_args(ctx: Ctx, args: list[str]) -> None:
    body = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
    k = ctx.kube
    k.kubectl(
        "-n", "kube-system", "patch", "deployment", "snapshot-controller",
        "--type=json", "-p", json.dumps(body),
    )  # fmt: skip
    k.kubectl(
        "-n", "kube-system", "rollout", "status", "deployment/snapshot-controller",
        "--timeout=180s", timeout=200,
    )  # fmt: skip


@contextmanager
def distributed_snapshotting(ctx: Ctx) -> Iterator[None]:
    k = ctx.kube
    deploy = k.get("apps/v1", "Deployment", "snapshot-controller", "kube-system") or {}
    args = list(deploy["spec"]["template"]["spec"]["containers"][0].get("args") or [])
    k.apply(nodes_rbac())
    _controller_args(ctx, [*args, DISTRIBUTED])
    try:
        yield
    finally:
        _controller_args(ctx, [a for a in args if a != DISTRIBUTED])
        k.kubectl("delete", "clusterrolebinding,clusterrole", NODES_RULE, check=False)


def _content(ctx: Ctx, ns: str, snapshot: str) -> Obj:
    vs = ctx.kube.get(SNAP_API, "VolumeSnapshot", snapshot, ns) or {}
    name = str((vs.get("status") or {}).get("boundVolumeSnapshotContentName"))
    return ctx.kube.get(SNAP_API, "VolumeSnapshotContent", name) or {}


@experiment("o", "local shape: a claim restored from a snapshot lands on its node", shape="local")
def restore_on_the_snapshots_node(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-o")
    k = ctx.kube
    # The second worker: a scheduler left to itself tries the first one too.
    node = ctx.workers[-1]
    with distributed_snapshotting(ctx):
        k.apply([pvc("src", ns, sc=WFFC), pod("writer", ns, "src", WRITE_BLOB, node=node)])
        k.wait_pod_ready(ns, "writer")
        want = until(
            "the writer's checksum",
            lambda: k.exec(ns, "writer", ["cat", "/data/sum"]).split()[0],
            60,
        )
        k.apply([_snapshot("snap", ns, "src")])
        until(
            "the snapshot readyToUse",
            lambda: _ready(k.get(SNAP_API, "VolumeSnapshot", "snap", ns)),
            240,
            2,
        )
        content = _content(ctx, ns, "snap")
        handle = str((content.get("status") or {}).get("snapshotHandle"))
        log(f"  snapshot handle {handle}")
        expect(f"the snapshot lives on {node}", handle.endswith(f"@{node}"), handle)
        restored = pvc(
            "restored",
            ns,
            sc=WFFC,
            dataSource={
                "apiGroup": "snapshot.storage.k8s.io",
                "kind": "VolumeSnapshot",
                "name": "snap",
            },
        )
        k.apply([restored, pod("reader", ns, "restored", "sleep 3600")])
        k.wait_pod_ready(ns, "reader", timeout=420)
        landed = (k.pod(ns, "reader") or {})["spec"]["nodeName"]
        refusals = [
            str(e.get("message"))
            for e in k.events(ns, "restored")
            if e.get("reason") == "ProvisioningFailed"
        ]
        log(f"  the reader runs on {landed}; provisioning refusals before: {len(refusals)}")
        for r in refusals[:3]:
            log(f"    {r[:300]}")
        expect(f"the restore landed on the snapshot's node {node}", landed == node, landed)
        expect(
            "every refusal on the way is RESOURCE_EXHAUSTED",
            all("ResourceExhausted" in r or "RESOURCE_EXHAUSTED" in r for r in refusals),
            refusals,
        )
        got = _sum(ctx, ns, "reader")
        expect("the restored data equal to the source's", got == want, (got, want))
        k.kubectl("-n", ns, "delete", "pod", "writer", "reader", "--wait=true")
        k.kubectl("-n", ns, "delete", "volumesnapshot", "snap", "--wait=true", timeout=200)
