"""The objects of `kubectl csi-hostpath why`'s cases (tests/unit/why_cases.py): Pods, claims,
StorageClasses, PersistentVolumes, VolumeAttachments, Nodes, CSINodes, the CSIDriver, events
and the driver's ledger view, each in the shape the API server (and the driver) answers with
JSON. The messages are the components' own words: the scheduler's, the attach-detach
controller's, the kubelet's, external-provisioner's and the driver's.

These shapes are written from those components' sources and from `kubectl get -o json` of the
same objects, not recorded from a live cluster; experiment q (tests/k8s/experiments/exp_why.py)
makes each case in a real one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

DRIVER = "loop.hostpath.csi.dev"
NS = "shop"
T0 = datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC).timestamp()
NOW = T0 + 600
LEDGER = {
    "namespace": "csi-hostpath",
    "service": "csi-hostpath-ledger",
    "port": "metrics",
    "controllerPod": "csi-hostpath-controller-0",
}
VOL = "vol-8c1d0b6f3a2e4d5c9b7a6f5e4d3c2b1a"
VOL2 = "vol-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def at(seconds: float) -> str:
    """T0 + seconds as the API writes times."""
    return datetime.fromtimestamp(T0 + seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, uid: str, created: float, ns: str | None = NS, **more: Any) -> Obj:
    m: Obj = {"name": name, "uid": uid, "creationTimestamp": at(created), **more}
    if ns:
        m["namespace"] = ns
    return m


def node(name: str, ready: str = "True", since: float = -3600) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, f"uid-node-{name}", -7200, None),
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": at(since)},
            ]
        },
    }


def csinode(name: str) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": meta(name, f"uid-csinode-{name}", -7000, None),
        "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "topologyKeys": None}]},
    }


def csidriver() -> Obj:
    import json

    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {
            **meta(DRIVER, "uid-csidriver", -7000, None),
            "annotations": {"loop.hostpath.csi.dev/ledger-view": json.dumps(LEDGER)},
        },
        "spec": {"attachRequired": True, "podInfoOnMount": True},
    }


def storage_class(name: str, binding: str = "Immediate") -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta(name, f"uid-sc-{name}", -7000, None),
        "provisioner": DRIVER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "parameters": {"csi.storage.k8s.io/fstype": "ext4"},
    }


def claim(
    name: str,
    created: float,
    volume: str = "",
    sc: str = "csi-hostpath",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    size: str = "64Mi",
    annotations: Obj | None = None,
) -> Obj:
    spec: Obj = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
        "storageClassName": sc,
        "volumeMode": "Filesystem",
    }
    status: Obj = {"phase": "Pending"}
    if volume:
        spec["volumeName"] = volume
        status = {"phase": "Bound", "accessModes": list(modes), "capacity": {"storage": size}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(name, f"uid-pvc-{name}", created, annotations=annotations or {}),
        "spec": spec,
        "status": status,
    }


def volume(
    name: str,
    handle: str,
    claim_name: str,
    created: float,
    bound: float,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": meta(name, f"uid-pv-{name}", created, None),
        "spec": {
            "accessModes": list(modes),
            "capacity": {"storage": "64Mi"},
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": NS, "name": claim_name},
            "csi": {
                "driver": DRIVER,
                "volumeHandle": handle,
                "fsType": "ext4",
                "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "1-x"},
            },
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "csi-hostpath",
        },
        "status": {"phase": "Bound", "lastPhaseTransitionTime": at(bound)},
    }


def attachment(pv: str, on: str, created: float, attached: bool, error: str = "") -> Obj:
    status: Obj = {"attached": attached}
    if attached:
        status["attachmentMetadata"] = {"generation": "1"}
    if error:
        status["attachError"] = {"time": at(created + 1), "message": error}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": meta(f"csi-{pv}-{on}", f"uid-va-{pv}-{on}", created, None),
        "spec": {"attacher": DRIVER, "nodeName": on, "source": {"persistentVolumeName": pv}},
        "status": status,
    }


def pod(
    name: str,
    claims: list[tuple[str, str]],
    on: str = "",
    created: float = 0,
    ready: bool = False,
    started: float | None = None,
    waiting: tuple[str, str] = ("ContainerCreating", ""),
    scheduled_message: str = "",
    secret: str = "",
) -> Obj:
    volumes: list[Obj] = [{"name": v, "persistentVolumeClaim": {"claimName": c}} for v, c in claims]
    if secret:
        volumes.append({"name": "secret", "secret": {"secretName": secret}})
    conditions: list[Obj] = []
    if on:
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(created)}
        )
    else:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": scheduled_message,
                "lastTransitionTime": at(created),
            }
        )
    conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    status: Obj = {
        "phase": "Running" if started is not None else "Pending",
        "conditions": conditions,
    }
    if on:
        state = (
            {"running": {"startedAt": at(started)}}
            if started is not None
            else {
                "waiting": {"reason": waiting[0], **({"message": waiting[1]} if waiting[1] else {})}
            }
        )
        status["containerStatuses"] = [
            {
                "name": "app",
                "ready": ready,
                "restartCount": 0,
                "state": state,
                "image": "busybox:1.37.0",
            }
        ]
    spec: Obj = {"containers": [{"name": "app", "image": "busybox:1.37.0"}], "volumes": volumes}
    if on:
        spec["nodeName"] = on
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, f"uid-pod-{name}", created),
        "spec": spec,
        "status": status,
    }


def event(obj: Obj, reason: str, message: str, when: float, kind: str = "Warning") -> Obj:
    m = obj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta(
            f"{m['name']}.{int(when)}",
            f"uid-ev-{m['name']}-{when}",
            when,
            m.get("namespace") or "default",
        ),
        "involvedObject": {
            "kind": obj["kind"],
            "name": m["name"],
            "namespace": m.get("namespace", ""),
            "uid": m["uid"],
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "count": 1,
        "firstTimestamp": at(when),
        "lastTimestamp": at(when),
        "source": {"component": "x"},
    }


def target(pod_name: str, pv: str) -> str:
    return f"/var/lib/kubelet/pods/uid-pod-{pod_name}/volumes/kubernetes.io~csi/{pv}/mount"


def view(
    handle: str,
    holders: list[Obj],
    stagings: list[Obj] | None = None,
    audit: list[Obj] | None = None,
    generation: int = 1,
) -> Obj:
    return {
        "schema": "csi-hostpath.ledger-view/v1",
        "volume_id": handle,
        "known": True,
        "now": NOW,
        "node_grace_seconds": 60.0,
        "name": "pvc-x",
        "capacity_bytes": 64 << 20,
        "generation": generation,
        "holders": holders,
        "stagings": stagings or [],
        "audit": audit or [],
    }


def held(on: str, since: float, generation: int = 1, age: float | None = 1.2) -> Obj:
    return {
        "node": on,
        "access_mode": "SINGLE_NODE_MULTI_WRITER",
        "readonly": False,
        "generation": generation,
        "since": T0 + since,
        "heartbeat_age_seconds": age,
        "silent": age is None or age >= 60,
    }


def staged(on: str, pv: str, at_: float, targets: list[str], generation: int = 1) -> Obj:
    return {
        "node": on,
        "staging": f"/var/lib/kubelet/plugins/kubernetes.io/csi/{DRIVER}/abc/globalmount",
        "device": "/dev/loop4",
        "access_mode": "SINGLE_NODE_MULTI_WRITER",
        "fs_type": "ext4",
        "readonly": False,
        "generation": generation,
        "staged_at": T0 + at_,
        "targets": targets,
    }


def row(action: str, on: str, when: float, generation: int, reason: str = "") -> Obj:
    return {
        "at": T0 + when,
        "actor": "controller",
        "action": action,
        "node": on,
        "generation": generation,
        "reason": reason,
    }
