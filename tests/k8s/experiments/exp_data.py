"""f, g, h, i: what is done to a volume's data through Kubernetes' APIs. A snapshot restored into a
new claim and a clone, both with equal data; online expansion the pod sees; a
VolumeAttributesClass change applied live (ControllerModifyVolume, then the node's I/O limit in
the pod's cgroup); a group snapshot of two claims."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from tests.k8s.experiments.context import (
    GROUP_API,
    GROUPSNAPCLASS,
    IMMEDIATE,
    SNAP_API,
    SNAPCLASS,
    THROTTLED,
    Ctx,
    expect,
    experiment,
    log,
    pod,
    pvc,
)
from tests.k8s.experiments.kube import Failed, Obj, until

WRITE_BLOB = (
    "dd if=/dev/urandom of=/data/blob bs=1k count=512 2>/dev/null && sync"
    " && md5sum /data/blob > /data/sum && sleep 3600"
)


def _sum(ctx: Ctx, ns: str, name: str) -> str:
    return ctx.kube.exec(ns, name, ["md5sum", "/data/blob"]).split()[0]


def _wrote(ctx: Ctx, ns: str, name: str) -> bool:
    return ctx.kube.exec(ns, f"w-{name}", ["cat", "/data/who"]).strip() == name


def _ready(obj: Obj | None) -> bool:
    return bool(((obj or {}).get("status") or {}).get("readyToUse"))


def _snapshot(name: str, ns: str, claim: str) -> Obj:
    return {
        "apiVersion": SNAP_API,
        "kind": "VolumeSnapshot",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "volumeSnapshotClassName": SNAPCLASS,
            "source": {"persistentVolumeClaimName": claim},
        },
    }


def _from_snapshot(name: str, ns: str, snapshot: str) -> Obj:
    return pvc(
        name,
        ns,
        dataSource={
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": snapshot,
        },
    )


@experiment("f", "snapshot restored into a new claim, and a clone: equal data")
def snapshot_and_clone(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-f")
    k = ctx.kube
    k.apply([pvc("src", ns), pod("writer", ns, "src", WRITE_BLOB)])
    k.wait_pod_ready(ns, "writer")
    want = until(
        "the writer's checksum", lambda: k.exec(ns, "writer", ["cat", "/data/sum"]).split()[0], 60
    )
    k.apply([_snapshot("snap", ns, "src")])
    until(
        "the snapshot readyToUse",
        lambda: _ready(k.get(SNAP_API, "VolumeSnapshot", "snap", ns)),
        180,
    )
    k.apply(
        [
            _from_snapshot("restored", ns, "snap"),
            pvc("clone", ns, dataSource={"kind": "PersistentVolumeClaim", "name": "src"}),
            pod("reads-restored", ns, "restored", "sleep 3600"),
            pod("reads-clone", ns, "clone", "sleep 3600"),
        ]
    )
    for name in ("reads-restored", "reads-clone"):
        k.wait_pod_ready(ns, name)
        got = _sum(ctx, ns, name)
        expect(f"{name}: the data equal to the source's", got == want, (got, want))


def _df_kib(ctx: Ctx, ns: str, name: str) -> int:
    return int(ctx.kube.exec(ns, name, ["df", "-k", "/data"]).splitlines()[-1].split()[1])


def _capacity(ctx: Ctx, ns: str, claim: str) -> str:
    return str(
        (((ctx.kube.pvc(ns, claim) or {}).get("status") or {}).get("capacity") or {}).get("storage")
    )


def _grown(ctx: Ctx, ns: str, name: str, before: int) -> int | None:
    n = _df_kib(ctx, ns, name)
    return n if n > before * 2 else None


def _expand(ctx: Ctx, ns: str, claim: str, size: str) -> None:
    body = json.dumps({"spec": {"resources": {"requests": {"storage": size}}}})
    ctx.kube.kubectl("-n", ns, "patch", "pvc", claim, "--type=merge", "-p", body)


# ext4 grows online through EXT4_IOC_RESIZE_FS, which needs CAP_SYS_RESOURCE; a host that withholds
# it from root (this project's machines) makes the driver refuse NodeExpandVolume, naming it, and
# grow the filesystem at the next NodeStage instead.
NO_SYS_RESOURCE = "lacks CAP_SYS_RESOURCE"


@experiment("g", "online expansion of a mounted claim; the pod sees the new size")
def online_expansion(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-g")
    k = ctx.kube
    cls = k.get("storage.k8s.io/v1", "StorageClass", IMMEDIATE) or {}
    params = {**(cls.get("parameters") or {}), "csi.storage.k8s.io/fstype": "xfs"}
    k.apply([{
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "e2e-xfs"},
        "provisioner": cls.get("provisioner"), "parameters": params, "allowVolumeExpansion": True,
    }])  # fmt: skip
    try:
        k.apply([
            pvc("grow-xfs", ns, size="320Mi", sc="e2e-xfs"),
            pod("xfs", ns, "grow-xfs", "sleep 3600"),
            pvc("grow-ext4", ns),
            pod("ext4", ns, "grow-ext4", "sleep 3600"),
        ])  # fmt: skip
        k.wait_pod_ready(ns, "xfs")
        k.wait_pod_ready(ns, "ext4")
        before = {n: _df_kib(ctx, ns, n) for n in ("xfs", "ext4")}
        _expand(ctx, ns, "grow-xfs", "800Mi")
        _expand(ctx, ns, "grow-ext4", "160Mi")
        until(
            "the xfs claim's capacity 800Mi",
            lambda: _capacity(ctx, ns, "grow-xfs") == "800Mi",
            240,
            2,
        )
        after = until(
            "the xfs pod's filesystem grown", lambda: _grown(ctx, ns, "xfs", before["xfs"]), 60
        )
        log(f"  xfs, online: df in the pod {before['xfs']} KiB -> {after} KiB")
        expect(
            "the pod kept running",
            (k.pod(ns, "xfs") or {})["status"]["containerStatuses"][0]["restartCount"] == 0,
        )

        vol4 = k.volume_handle(ns, "grow-ext4")
        node4 = (k.pod(ns, "ext4") or {})["spec"]["nodeName"]

        def ext4_done() -> str | None:
            if _capacity(ctx, ns, "grow-ext4") == "160Mi":
                return "online"
            # The kubelet logs the refusal but records no event; the node plugin's log has it.
            plugin = ctx.node_plugin(node4)["metadata"]["name"]
            text = k.logs(ctx.driver_ns, plugin, "csi-hostpath")
            refused = f"method=NodeExpandVolume volume_id='{vol4}'"
            lines = [x for x in text.splitlines() if refused in x and "FAILED_PRECONDITION" in x]
            return "refused" if lines else None

        how = until(
            "the ext4 claim grown online, or refused for want of CAP_SYS_RESOURCE",
            ext4_done,
            240,
            2,
        )
        if how == "refused":
            log(f"  ext4: online resize refused ({NO_SYS_RESOURCE}); a new pod stages it grown")
            k.kubectl("-n", ns, "delete", "pod", "ext4", "--wait=true")
            k.apply([pod("ext4-again", ns, "grow-ext4", "sleep 3600")])
            k.wait_pod_ready(ns, "ext4-again")
            after4 = until(
                "the ext4 filesystem grown",
                lambda: _grown(ctx, ns, "ext4-again", before["ext4"]),
                60,
            )
            until(
                "the ext4 claim's capacity 160Mi",
                lambda: _capacity(ctx, ns, "grow-ext4") == "160Mi",
                120,
                2,
            )
            log(f"  ext4, at the next stage: {before['ext4']} KiB -> {after4} KiB")
    finally:
        k.kubectl("delete", "storageclass", "e2e-xfs", "--ignore-not-found", check=False)


def _cgroup_rules(pod_uid: str, device: str) -> list[str]:
    """The blkio (v1) or io.max (v2) rules for this device in the pod's cgroups, as the host
    sees them."""
    st = os.stat(device) if os.path.exists(device) else None
    majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if st else device
    found = []
    uid_forms = (pod_uid, pod_uid.replace("-", "_"))
    for base in (Path("/sys/fs/cgroup/blkio"), Path("/sys/fs/cgroup")):
        if not base.is_dir():
            continue
        for root, dirs, files in os.walk(base):
            if not any(u in os.path.basename(root) for u in uid_forms):
                continue
            dirs.clear()
            for f in files:
                if f in ("blkio.throttle.write_bps_device", "io.max"):
                    found += [
                        f"{f}: {line}"
                        for line in Path(root, f).read_text().splitlines()
                        if line.startswith(majmin + " ")
                    ]
    return found


@experiment("h", "VolumeAttributesClass: ControllerModifyVolume changes a mutable parameter live")
def attributes_class(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-h")
    k = ctx.kube
    vac = k.get("storage.k8s.io/v1", "VolumeAttributesClass", THROTTLED)
    if vac is None:
        raise Failed(f"the chart made no VolumeAttributesClass {THROTTLED}")
    k.apply([pvc("tuned", ns), pod("user", ns, "tuned", "sleep 3600")])
    p = k.wait_pod_ready(ns, "user")
    vol = k.volume_handle(ns, "tuned")
    k.kubectl(
        "-n",
        ns,
        "patch",
        "pvc",
        "tuned",
        "--type=merge",
        "-p",
        f'{{"spec":{{"volumeAttributesClassName":"{THROTTLED}"}}}}',
    )

    def current() -> bool:
        st = (k.pvc(ns, "tuned") or {}).get("status") or {}
        return st.get("currentVolumeAttributesClassName") == THROTTLED and not st.get(
            "modifyVolumeStatus"
        )

    until(f"the claim's current class {THROTTLED}", current, 180)
    files = ctx.nodes.pool_dir / "volumes" / f"{vol}.img"
    st = files.stat()
    loops = [
        d.name
        for d in ctx.nodes.pool_loop_devices()
        if (d.back_dev, d.back_ino) == (st.st_dev, st.st_ino)
    ]
    expect("the volume has its loop device", len(loops) == 1, loops)
    rules = until(
        "the node's write limit in the pod's cgroup",
        lambda: [r for r in _cgroup_rules(p["metadata"]["uid"], loops[0]) if "10485760" in r],
        60,
    )
    log(f"  {rules[0]}")
    expect("10 MiB/s written into the pod's cgroup for its loop device", bool(rules))


@experiment("i", "a group snapshot of two claims, each member restorable")
def group_snapshot(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-i")
    k = ctx.kube
    objs: list[Obj] = []
    for name in ("g1", "g2"):
        c = pvc(name, ns)
        c["metadata"]["labels"] = {"group": "both"}
        objs += [c, pod(f"w-{name}", ns, name, f"echo {name} > /data/who && sync && sleep 3600")]
    k.apply(objs)
    for name in ("g1", "g2"):
        k.wait_pod_ready(ns, f"w-{name}")
        until(f"{name} written", functools.partial(_wrote, ctx, ns, name), 30)
    k.apply(
        [
            {
                "apiVersion": GROUP_API,
                "kind": "VolumeGroupSnapshot",
                "metadata": {"name": "both", "namespace": ns},
                "spec": {
                    "volumeGroupSnapshotClassName": GROUPSNAPCLASS,
                    "source": {"selector": {"matchLabels": {"group": "both"}}},
                },
            }
        ]
    )
    until(
        "the group snapshot readyToUse",
        lambda: _ready(k.get(GROUP_API, "VolumeGroupSnapshot", "both", ns)),
        180,
    )
    members = [
        s
        for s in k.objects(SNAP_API, "VolumeSnapshot", ns)
        if any(
            o.get("kind") == "VolumeGroupSnapshot"
            for o in s["metadata"].get("ownerReferences") or []
        )
    ]
    expect(
        "two member snapshots, both ready",
        len(members) == 2 and all(_ready(s) for s in members),
        [s["metadata"]["name"] for s in members],
    )
    restored = []
    for i, s in enumerate(members):
        k.apply(
            [
                _from_snapshot(f"r{i}", ns, s["metadata"]["name"]),
                pod(f"reads-r{i}", ns, f"r{i}", "sleep 3600"),
            ]
        )
        k.wait_pod_ready(ns, f"reads-r{i}")
        restored.append(k.exec(ns, f"reads-r{i}", ["cat", "/data/who"]).strip())
    expect("the members restore to each claim's data", sorted(restored) == ["g1", "g2"], restored)
