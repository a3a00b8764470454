"""j, l: the pool. In the local shape a claim bigger than any node's free capacity stays Pending
with the scheduler's reason; `helm uninstall` then the claims deleted leaves no loop device,
mount or orphan file, only the data the user chose to keep (a Retain volume)."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity

from tests.k8s.experiments.context import (
    DRIVER,
    IMMEDIATE,
    WFFC,
    Ctx,
    expect,
    experiment,
    log,
    pod,
    pvc,
)
from tests.k8s.experiments.kube import condition, holds, until


def _capacities(ctx: Ctx) -> dict[str, Decimal]:
    """The driver's CSIStorageCapacity objects: the capacity each node's pool publishes."""
    out: dict[str, Decimal] = {}
    for c in ctx.kube.objects("storage.k8s.io/v1", "CSIStorageCapacity"):
        terms = (c.get("nodeTopology") or {}).get("matchLabels") or {}
        node = terms.get(f"topology.{DRIVER}/node")
        if node and c.get("capacity") and c.get("storageClassName") == WFFC:
            out[str(node)] = Decimal(parse_quantity(c["capacity"]))
    return out


@experiment(
    "j",
    "local shape: a claim bigger than any node's capacity stays Pending, with the reason",
    shape="local",
)
def too_big(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-j")
    k = ctx.kube

    def every_worker() -> dict[str, Decimal] | None:
        c = _capacities(ctx)
        return c if c and set(ctx.workers) <= set(c) else None

    caps = until("a published capacity for every worker", every_worker, 180, 3)
    log(f"  capacities: { {n: f'{v / 2**30:.1f}Gi' for n, v in caps.items()} }")
    k.apply(
        [pvc("small", ns, sc=WFFC), pod("fits", ns, "small", "echo local > /data/f && sleep 3600")]
    )
    k.wait_pod_ready(ns, "fits")
    size = f"{int(max(caps.values()) * 2 / 2**30) + 1}Gi"
    k.apply([pvc("huge", ns, size=size, sc=WFFC), pod("wants-huge", ns, "huge", "sleep 3600")])

    def refused() -> str | None:
        c = condition(k.pod(ns, "wants-huge"), "PodScheduled")
        return str(c.get("message")) if c and c.get("status") == "False" else None

    why = until(f"the pod of the {size} claim refused by the scheduler", refused, 90)
    log(f"  scheduler: {why}")
    expect("the reason: not enough free storage", "enough free storage" in why, why)
    holds(
        "the claim Pending",
        lambda: (k.pvc(ns, "huge") or {})["status"].get("phase") == "Pending",
        15,
    )


def _pool_files(ctx: Ctx) -> dict[str, str]:
    """Every backing file in the shared pool: its id -> volumes or snapshots."""
    out = {}
    for kind in ("volumes", "snapshots"):
        d = ctx.nodes.pool_dir / kind
        for f in sorted(d.glob("*.img")) if d.is_dir() else []:
            out[f.stem] = kind
    return out


def _named(ctx: Ctx) -> set[str]:
    """The ids Kubernetes still names: every PV's volume handle, every snapshot content's handle."""
    names = {
        str(pv["spec"]["csi"]["volumeHandle"])
        for pv in ctx.kube.objects("v1", "PersistentVolume")
        if (pv["spec"].get("csi") or {}).get("driver") == DRIVER
    }
    try:
        contents = ctx.kube.objects("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent")
    except Exception:  # the snapshot API is not served
        contents = []
    names |= {str((c.get("status") or {}).get("snapshotHandle")) for c in contents}
    return names


def _leftovers(ctx: Ctx) -> None:
    for w in ctx.workers:
        mounts = ctx.nodes.csi_mounts(w)
        expect(f"no CSI mount left on {w}", not mounts, mounts)
    loops = ctx.nodes.pool_loop_devices()
    expect("no loop device of the pool left", not loops, loops)
    orphans = sorted(set(_pool_files(ctx)) - _named(ctx))
    expect(
        "no orphan file in the pool (each one a PV or snapshot still names)", not orphans, orphans
    )


@experiment(
    "l", "helm uninstall, claims deleted: no loop device, mount or orphan file; kept data stays"
)
def uninstall(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-l")
    k = ctx.kube
    cls = k.get("storage.k8s.io/v1", "StorageClass", IMMEDIATE) or {}
    k.apply(
        [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "e2e-retain"},
                "provisioner": DRIVER,
                "reclaimPolicy": "Retain",
                "volumeBindingMode": "Immediate",
                "parameters": cls.get("parameters") or {},
            }
        ]
    )
    k.apply(
        [
            pvc("dropped", ns),
            pvc("kept", ns, sc="e2e-retain"),
            pod(
                "user",
                ns,
                "dropped",
                "echo mine > /data/f && echo mine > /kept/f && sync && sleep 3600",
                volumes=[{"name": "kept", "persistentVolumeClaim": {"claimName": "kept"}}],
                mounts=[{"name": "kept", "mountPath": "/kept"}],
            ),
        ]
    )
    k.wait_pod_ready(ns, "user")
    dropped, kept = k.volume_handle(ns, "dropped"), k.volume_handle(ns, "kept")
    kept_pv = (k.pvc(ns, "kept") or {})["spec"]["volumeName"]
    k.kubectl("-n", ns, "delete", "pod", "user", "--wait=true")
    until(
        "no VolumeAttachment left",
        lambda: not k.objects("storage.k8s.io/v1", "VolumeAttachment"),
        120,
    )
    ctx.uninstall()
    k.kubectl("-n", ns, "delete", "pvc", "dropped", "kept", "--wait=true")
    _leftovers(ctx)
    files = _pool_files(ctx)
    expect(
        "both volumes' files still in the pool, the driver being gone",
        {dropped, kept} <= set(files),
        files,
    )
    # The driver back: the provisioner finishes the deletion it could not do without it.
    ctx.install("shared")
    until(
        "the deleted claim's volume gone from the pool",
        lambda: dropped not in _pool_files(ctx),
        180,
        2,
    )
    k.kubectl("delete", "pv", kept_pv, "--wait=true")
    k.kubectl("delete", "storageclass", "e2e-retain")
    _leftovers_ok = _pool_files(ctx)
    expect(
        "the Retain volume's data stays, the user's to keep", kept in _leftovers_ok, _leftovers_ok
    )
    orphans = sorted(set(_leftovers_ok) - _named(ctx) - {kept})
    expect("nothing else", not orphans, orphans)
    # The user's decision, made here as the user would: remove the data they kept.
    (ctx.nodes.pool_dir / "volumes" / f"{kept}.img").unlink()
