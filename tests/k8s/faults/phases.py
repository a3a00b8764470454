"""One volume taken to the edge of a phase, the action that starts the phase, the moment the kill
is due (TRIGGERS), what "done" means, and the data check after it. A cell's volume lives in its
own namespace; its pod runs on node A (the worker without the controller) and, where the data
move, on B."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.k8s.experiments.context import SNAP_API, WFFC, Ctx, log, pod, pvc
from tests.k8s.experiments.exp_data import (
    WRITE_BLOB,
    _capacity,
    _df_kib,
    _expand,
    _from_snapshot,
    _ready,
    _snapshot,
)
from tests.k8s.experiments.kube import Failed, pod_ready
from tests.k8s.faults import invariants as inv
from tests.k8s.faults.observe import Observer, wait_for

# The StorageClass of the expansion cells: xfs grows online where ext4 can't (a kind node lacks
# CAP_SYS_RESOURCE, docs/design.md "Expansion"); the harness makes it from the chart's class.
XFS_CLASS = "faults-xfs"
SMALL, XFS_FROM, XFS_TO = "64Mi", "320Mi", "800Mi"


@dataclass
class Subject:
    ctx: Ctx
    observer: Observer
    ns: str
    a: str
    b: str
    timeout: float = 300
    wffc: bool = False
    claim: str = "vol"
    pv: str = ""
    handle: str = ""
    checksum: str = ""
    uid: str = ""  # the pod on A whose target mount an unpublish removes
    df_before: int = 0
    pvs: set[str] = field(default_factory=set)

    # --- helpers -------------------------------------------------------------------------------
    def _wait(self, what: str, probe: Callable[[], Any]) -> Any:
        return wait_for(what, probe, self.timeout)

    def _ready(self, name: str) -> None:
        self._wait(
            f"pod {self.ns}/{name} Ready", lambda: pod_ready(self.ctx.kube.pod(self.ns, name))
        )

    def _sum(self, name: str) -> str:
        return self.ctx.kube.exec(self.ns, name, ["md5sum", "/data/blob"]).split()[0]

    def _bound(self) -> bool:
        c = self.ctx.kube.pvc(self.ns, self.claim) or {}
        if (c.get("status") or {}).get("phase") != "Bound":
            return False
        self.pv = c["spec"]["volumeName"]
        self.handle = self.ctx.kube.volume_handle(self.ns, self.claim)
        self.pvs.add(self.pv)
        return True

    def _write(self, name: str, node: str) -> None:
        """A pod on `node` writes 512 KiB of random data; its checksum is the one to keep."""
        self.ctx.kube.apply([pod(name, self.ns, self.claim, WRITE_BLOB, node=node)])
        self._ready(name)
        self.checksum = str(
            self._wait(
                "the written data's checksum",
                lambda: self.ctx.kube.exec(self.ns, name, ["cat", "/data/sum"]).split()[0],
            )
        )
        self._wait("the claim bound", self._bound)

    def _delete_pod(self, name: str, wait: bool = True) -> None:
        self.ctx.kube.kubectl(
            "-n",
            self.ns,
            "delete",
            "pod",
            name,
            "--ignore-not-found",
            f"--wait={str(wait).lower()}",
        )

    def _attached_to(self) -> list[str]:
        return [
            str(a["spec"]["nodeName"])
            for a in self.ctx.kube.objects("storage.k8s.io/v1", "VolumeAttachment")
            if (a["spec"].get("source") or {}).get("persistentVolumeName") == self.pv
        ]

    def _va_attached(self, node: str) -> bool:
        return any(
            a["spec"]["nodeName"] == node and (a.get("status") or {}).get("attached")
            for a in self.ctx.kube.objects("storage.k8s.io/v1", "VolumeAttachment")
            if (a["spec"].get("source") or {}).get("persistentVolumeName") == self.pv
        )

    def _a_paths(self) -> list[str]:
        return inv.csi_targets(self.observer.mounts(self.a))

    def _staged_in(self, mount_points: list[str]) -> bool:
        marks = (inv.handle_sha(self.handle), f"/pv/{self.pv}/globalmount")
        return any(p.endswith("/globalmount") and any(m in p for m in marks) for p in mount_points)

    def _target_in(self, mount_points: list[str]) -> bool:
        return any(f"/pods/{self.uid}/" in p for p in mount_points)

    def _staged_on_a(self) -> bool:
        return self._staged_in(self._a_paths())

    def _target_on_a(self) -> bool:
        return self._target_in(self._a_paths())

    def unstage_window(self, mount_points: list[str]) -> str:
        """Where A's mounts are in the unstage: "before" (the pod's target there), "in" (the
        target gone, the staging mount there) or "after" (both gone)."""
        if self._target_in(mount_points):
            return "before"
        return "in" if self._staged_in(mount_points) else "after"

    # --- the phases ----------------------------------------------------------------------------
    def prepare(self, phase: str) -> None:
        k = self.ctx.kube
        if phase == "create":
            return
        if phase == "expand":
            k.apply([pvc(self.claim, self.ns, size=XFS_FROM, sc=XFS_CLASS)])
        else:
            k.apply([pvc(self.claim, self.ns, size=SMALL)])
        if phase in ("attach", "stage", "publish", "delete"):
            # Written elsewhere first, so the data crosses the phase under test.
            where = self.a if phase == "delete" else self.b
            self._write("writer", where)
            self._delete_pod("writer")
            self._wait(f"{self.pv} detached", lambda: not self._attached_to())
        else:
            self._write("user", self.a)
            self.uid = str((k.pod(self.ns, "user") or {})["metadata"]["uid"])
            if phase == "expand":
                self.df_before = _df_kib(self.ctx, self.ns, "user")
        log(f"  prepared for {phase}: {self.pv} ({self.handle}), checksum {self.checksum}")

    def act(self, phase: str) -> None:
        k = self.ctx.kube
        if phase == "create":
            if self.wffc:
                k.apply(
                    [
                        pvc(self.claim, self.ns, size=SMALL, sc=WFFC),
                        pod("reader", self.ns, self.claim, "sleep 3600", node=self.a),
                    ]
                )
            else:
                k.apply([pvc(self.claim, self.ns, size=SMALL)])
        elif phase in ("attach", "stage", "publish"):
            k.apply([pod("reader", self.ns, self.claim, "sleep 3600", node=self.a)])
        elif phase == "expand":
            _expand(self.ctx, self.ns, self.claim, XFS_TO)
        elif phase == "snapshot":
            k.apply([_snapshot("snap", self.ns, self.claim)])
        elif phase in ("unpublish", "unstage", "detach"):
            self._delete_pod("user", wait=False)
        elif phase == "delete":
            k.kubectl("-n", self.ns, "delete", "pvc", self.claim, "--wait=false")
        else:
            raise Failed(f"no phase {phase}")

    def triggered(self, trigger: str) -> bool:
        if trigger == "at-action":
            return True
        if trigger in ("va-created", "va-attached"):
            return (
                (self.a in self._attached_to())
                if trigger == "va-created"
                else (self._va_attached(self.a))
            )
        if trigger == "staged-on-a":
            return self._staged_on_a()
        if trigger == "node-resize-pending":
            st = (self.ctx.kube.pvc(self.ns, self.claim) or {}).get("status") or {}
            pending = (st.get("allocatedResourceStatuses") or {}).get("storage")
            conds = {c.get("type") for c in st.get("conditions") or []}
            return pending == "NodeResizePending" or "FileSystemResizePending" in conds
        if trigger == "content-created":
            snap = self.ctx.kube.get(SNAP_API, "VolumeSnapshot", "snap", self.ns) or {}
            return bool((snap.get("status") or {}).get("boundVolumeSnapshotContentName"))
        if trigger == "target-gone":
            return not self._target_on_a() and self._staged_on_a()
        if trigger == "unstaged":
            return not self._staged_on_a() and bool(self._attached_to())
        raise Failed(f"no trigger {trigger}")

    def done(self, phase: str) -> bool:
        k = self.ctx.kube
        if phase == "create":
            ok = (
                self._bound()
                and (self.observer.pool_dir / "volumes" / f"{self.handle}.img").exists()
            )
            return ok and (not self.wffc or pod_ready(k.pod(self.ns, "reader")))
        if phase in ("attach", "stage", "publish"):
            return pod_ready(k.pod(self.ns, "reader"))
        if phase == "expand":
            return _capacity(self.ctx, self.ns, self.claim) == XFS_TO and (
                _df_kib(self.ctx, self.ns, "user") > 2 * self.df_before
            )
        if phase == "snapshot":
            return _ready(k.get(SNAP_API, "VolumeSnapshot", "snap", self.ns))
        if phase == "unpublish":
            return k.pod(self.ns, "user") is None and not self._target_on_a()
        if phase == "unstage":
            return k.pod(self.ns, "user") is None and not self._staged_on_a()
        if phase == "detach":
            return not self._attached_to() and not any(
                h.volume == self.handle for h in self.observer.holds()
            )
        if phase == "delete":
            gone = k.get("v1", "PersistentVolume", self.pv) is None
            return gone and not (self.observer.pool_dir / "volumes" / f"{self.handle}.img").exists()
        raise Failed(f"no phase {phase}")

    def verify(self, phase: str) -> list[inv.Violation]:
        """The data after the phase: read where the phase left them, or from B after a move."""
        if phase in ("create", "delete"):
            return []
        if phase in ("attach", "stage", "publish"):
            return inv.data_kept(f"{self.pv} read on {self.a}", self.checksum, self._sum("reader"))
        if phase == "expand":
            return inv.data_kept(f"{self.pv} after growing", self.checksum, self._sum("user"))
        k = self.ctx.kube
        if phase == "snapshot":
            k.apply(
                [
                    _from_snapshot("restored", self.ns, "snap"),
                    pod("restored", self.ns, "restored", "sleep 3600", node=self.b),
                ]
            )
            self._ready("restored")
            self.pvs.add(str((k.pvc(self.ns, "restored") or {})["spec"]["volumeName"]))
            return inv.data_kept(
                f"{self.pv} in its snapshot", self.checksum, self._sum("restored")
            ) + inv.data_kept(f"{self.pv} itself", self.checksum, self._sum("user"))
        k.apply([pod("reader", self.ns, self.claim, "sleep 3600", node=self.b)])
        self._ready("reader")
        return inv.data_kept(f"{self.pv} moved to {self.b}", self.checksum, self._sum("reader"))

    def cleanup(self) -> None:
        """The namespace and everything in it; then every PV of the cell gone (reclaim Delete),
        and the snapshot's content with it."""
        k = self.ctx.kube
        k.kubectl("delete", "namespace", self.ns, "--ignore-not-found", "--wait=false")
        self._wait(f"namespace {self.ns} gone", lambda: k.get("v1", "Namespace", self.ns) is None)
        self._wait(
            f"the cell's PVs gone ({', '.join(sorted(self.pvs)) or 'none'})",
            lambda: all(k.get("v1", "PersistentVolume", p) is None for p in self.pvs),
        )
        out = k.kubectl("get", "volumesnapshotcontents", "-o", "json", check=False) or "{}"
        left = [
            c["metadata"]["name"]
            for c in json.loads(out).get("items") or []
            if (c["spec"].get("volumeSnapshotRef") or {}).get("namespace") == self.ns
        ]
        if left:
            self._wait(
                f"the snapshot contents {left} gone",
                lambda: all(k.get(SNAP_API, "VolumeSnapshotContent", n) is None for n in left),
            )
