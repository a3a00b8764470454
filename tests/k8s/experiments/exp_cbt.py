"""m: changed-block tracking through the real external-snapshot-metadata sidecar (KEP-3314). A
block claim gets random data at known 4 KiB blocks, is snapshotted, gets more at other blocks (one
of them over an earlier one), and is snapshotted again; external-snapshot-metadata's own client,
snapshot-metadata-lister, run in a pod with a ServiceAccount of its own, lists the first
snapshot's allocated blocks and the delta between the two, through the sidecar's TLS API. The
client is the project's own build of it over the module's library (tools/cluster/go/
external-snapshot-metadata/lister: the module's own client is not served at v1.x)."""

from __future__ import annotations

import json

from tests.k8s.experiments.context import (
    SNAP_API,
    Ctx,
    account_binding,
    expect,
    experiment,
    log,
    pvc,
    service_account,
)
from tests.k8s.experiments.exp_data import _ready, _snapshot
from tests.k8s.experiments.kube import Failed, Obj, until

# external-snapshot-metadata v1.x serves and reads only v1beta1 (v1alpha1 went with beta).
CBT_API = "cbt.storage.k8s.io/v1beta1"
LISTER = "snapshot-metadata-lister:v1.1.0"
BLOCK = 4096
DEVICE = "/dev/xvda"
# The blocks written before the first snapshot and between the two, as (first block, count):
# the volume's first and last blocks, runs at 1 MiB and 16 MiB; then runs at 4 MiB and 32 MiB and
# one block inside the 1 MiB run, rewritten with other data.
FIRST = [(0, 4), (256, 8), (4096, 1), (16383, 1)]
SECOND = [(1024, 4), (8192, 8), (258, 1)]
SIZE = "64Mi"


def blocks(runs: list[tuple[int, int]]) -> set[int]:
    return {b for first, count in runs for b in range(first, first + count)}


def listed_blocks(text: str) -> tuple[set[int], int]:
    """The 4 KiB blocks the lister's -o json output covers, and the volume size it reports. Its
    records are the gRPC stream's messages; byte_offset 0 is left out (protobuf JSON)."""
    records = json.loads(text)
    got: set[int] = set()
    capacity = 0
    for rec in records:
        capacity = int(rec.get("volume_capacity_bytes") or 0)
        for r in rec.get("block_metadata") or []:
            off, size = int(r.get("byte_offset") or 0), int(r.get("size_bytes") or 0)
            if off % BLOCK or size % BLOCK or size <= 0:
                raise Failed(f"a range not of whole {BLOCK}-byte blocks: {r}")
            got |= set(range(off // BLOCK, (off + size) // BLOCK))
    return got, capacity


def _write(runs: list[tuple[int, int]]) -> str:
    return " && ".join(
        f"dd if=/dev/urandom of={DEVICE} bs={BLOCK} seek={first} count={count}"
        " conv=notrunc,fsync 2>/dev/null"
        for first, count in runs
    )


def block_pod(name: str, ns: str, claim: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.37.0",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "sleep 3600"],
                    "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
                    "volumeDevices": [{"name": "data", "devicePath": DEVICE}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def client_rbac(ns: str, account: str) -> list[Obj]:
    """A backup client's account and rights: those of external-snapshot-metadata's
    deploy/snapshot-metadata-client-cluster-role.yaml (v1.1.0)."""
    role = f"{ns}-{account}"
    return [
        service_account(account, ns),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": ["snapshot.storage.k8s.io"],
                    "resources": ["volumesnapshots", "volumesnapshotcontents"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["cbt.storage.k8s.io"],
                    "resources": ["snapshotmetadataservices"],
                    "verbs": ["get", "list"],
                },
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            ],
        },
        account_binding("ClusterRoleBinding", role, role, account, ns),
    ]


def lister_pod(name: str, ns: str, account: str, args: list[str], host: str, ip: str) -> Obj:
    """The lister, once; its /etc/hosts names the sidecar's Service (a cluster without DNS: the
    SnapshotMetadataService's address is that name, and the certificate is the name's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "serviceAccountName": account,
            "restartPolicy": "Never",
            "hostAliases": [{"ip": ip, "hostnames": [host]}],
            "containers": [
                {
                    "name": "lister",
                    "image": LISTER,
                    "imagePullPolicy": "IfNotPresent",
                    "args": args,
                    "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}},
                }
            ],
        },
    }


def _phase(ctx: Ctx, ns: str, name: str) -> str | None:
    phase = ((ctx.kube.pod(ns, name) or {}).get("status") or {}).get("phase")
    return str(phase) if phase in ("Succeeded", "Failed") else None


def run_lister(ctx: Ctx, ns: str, name: str, args: list[str], host: str, ip: str) -> str:
    ctx.kube.apply([lister_pod(name, ns, "backup", ["-n", ns, *args, "-o", "json"], host, ip)])
    phase = until(f"the lister pod {name} finished", lambda: _phase(ctx, ns, name), 180, 2)
    out = ctx.kube.logs(ns, name, "lister")
    if phase != "Succeeded":
        raise Failed(f"the lister pod {name} {phase}: {out.strip()[-600:]}")
    log(f"  snapshot-metadata-lister {' '.join(args)} -o json: {out.strip()[:600]}")
    return out


@experiment("m", "changed blocks through external-snapshot-metadata equal the blocks written")
def changed_blocks(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-m")
    k = ctx.kube
    sms = k.get(CBT_API, "SnapshotMetadataService", "loop.hostpath.csi.dev")
    expect("the chart's SnapshotMetadataService exists", sms is not None)
    address = str((sms or {})["spec"]["address"])
    host = address.rsplit(":", 1)[0]
    svc_name, svc_ns = host.split(".", 1)
    svc = k.get("v1", "Service", svc_name, svc_ns) or {}
    ip = str((svc.get("spec") or {}).get("clusterIP") or "")
    expect("the sidecar's Service has a cluster address", bool(ip), svc.get("spec"))
    controller = ctx.controller_pod()
    ready = {c["name"]: c.get("ready") for c in controller["status"].get("containerStatuses") or []}
    expect(
        "the csi-snapshot-metadata sidecar Ready", ready.get("csi-snapshot-metadata") is True, ready
    )
    k.apply(
        [
            pvc("vol", ns, size=SIZE, volumeMode="Block"),
            block_pod("writer", ns, "vol"),
            *client_rbac(ns, "backup"),
        ]
    )
    k.wait_pod_ready(ns, "writer")
    k.exec(ns, "writer", ["sh", "-c", _write(FIRST) + " && sync"])
    k.apply([_snapshot("snap-1", ns, "vol")])
    until("snap-1 readyToUse", lambda: _ready(k.get(SNAP_API, "VolumeSnapshot", "snap-1", ns)), 180)
    k.exec(ns, "writer", ["sh", "-c", _write(SECOND) + " && sync"])
    k.apply([_snapshot("snap-2", ns, "vol")])
    until("snap-2 readyToUse", lambda: _ready(k.get(SNAP_API, "VolumeSnapshot", "snap-2", ns)), 180)

    allocated, cap = listed_blocks(run_lister(ctx, ns, "allocated", ["-s", "snap-1"], host, ip))
    log(f"  allocated in snap-1: {_runs(allocated)} (blocks of {BLOCK} bytes), volume {cap} bytes")
    expect("the volume's size as the claim's", cap == 64 * 1024 * 1024, cap)
    want = blocks(FIRST)
    expect(
        "snap-1's allocated blocks are exactly those written",
        allocated == want,
        _diff(allocated, want),
    )
    delta, _ = listed_blocks(
        run_lister(ctx, ns, "delta", ["-s", "snap-2", "-p", "snap-1"], host, ip)
    )
    log(f"  changed from snap-1 to snap-2: {_runs(delta)}")
    want = blocks(SECOND)
    expect(
        "the delta's blocks are exactly those written between", delta == want, _diff(delta, want)
    )


def _runs(got: set[int]) -> list[tuple[int, int]]:
    """Blocks as (first, count) runs, for the log."""
    out: list[tuple[int, int]] = []
    for b in sorted(got):
        if out and out[-1][0] + out[-1][1] == b:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


def _diff(got: set[int], want: set[int]) -> str:
    return f"extra {_runs(got - want)}, missing {_runs(want - got)}"
