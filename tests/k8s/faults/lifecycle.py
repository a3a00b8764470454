"""One claim's life during the chaos run: created, written on one worker, read back (there, or on
the other worker after a move, or from its snapshot or its clone), deleted. Its outcome is
completed, data-lost (what was read differs from what was written), or stuck (a step timed out,
naming the step): faults slow a life down, they must never change its data."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.k8s.experiments.context import Ctx, pod, pvc
from tests.k8s.experiments.exp_data import WRITE_BLOB, _from_snapshot, _ready, _snapshot
from tests.k8s.experiments.kube import Failed, Obj, pod_ready
from tests.k8s.faults.observe import wait_for
from tests.k8s.faults.schedule import LifecycleSpec

DEVICE = "/dev/xvda"
# A block claim: 512 KiB of random data written to the device, their checksum kept in the pod.
WRITE_DEVICE = (
    f"dd if=/dev/urandom of=/tmp/blob bs=1k count=512 2>/dev/null"
    f" && dd if=/tmp/blob of={DEVICE} bs=1k count=512 conv=fsync 2>/dev/null"
    " && md5sum /tmp/blob > /tmp/sum && sleep 3600"
)
READ_DEVICE = f"dd if={DEVICE} bs=1k count=512 2>/dev/null | md5sum"


def block_pod(name: str, ns: str, claim: str, script: str, node: str) -> Obj:
    """pod() with the claim as a raw device instead of a mount."""
    p = pod(name, ns, claim, script, node=node)
    c = p["spec"]["containers"][0]
    del c["volumeMounts"]
    c["volumeDevices"] = [{"name": "data", "devicePath": DEVICE}]
    return p


@dataclass
class Outcome:
    index: int
    kind: str
    # completed, data-lost, stuck or error.
    result: str
    seconds: float
    detail: str = ""


class Life:
    def __init__(self, ctx: Ctx, spec: LifecycleSpec, seed: int, timeout: float) -> None:
        self.ctx, self.spec, self.timeout = ctx, spec, timeout
        self.ns = f"chaos-{seed}-{spec.index}"
        self.x = ctx.workers[spec.first]
        self.y = ctx.workers[1 - spec.first]
        self.block = spec.kind == "block"

    def wait(self, what: str, probe: Callable[[], Any]) -> Any:
        return wait_for(f"{self.ns}: {what}", probe, self.timeout, 2)

    def ready(self, name: str) -> None:
        self.wait(f"pod {name} Ready", lambda: pod_ready(self.ctx.kube.pod(self.ns, name)))

    def written(self, name: str) -> str:
        path = "/tmp/sum" if self.block else "/data/sum"
        return str(
            self.wait(
                "the written checksum",
                lambda: self.ctx.kube.exec(self.ns, name, ["cat", path]).split()[0],
            )
        )

    def read(self, name: str) -> str:
        argv = ["sh", "-c", READ_DEVICE] if self.block else ["md5sum", "/data/blob"]
        return str(
            self.wait(f"{name}'s read", lambda: self.ctx.kube.exec(self.ns, name, argv).split()[0])
        )

    def kubectl(self, *args: str) -> None:
        """kubectl again until it works: the API server may be the component just killed."""
        self.wait(f"kubectl {' '.join(args[:4])}", lambda: self.ctx.kube.kubectl(*args) or True)

    def apply(self, objs: list[Obj]) -> None:
        def once() -> bool:
            self.ctx.kube.apply(objs)
            return True

        self.wait(
            f"applied {', '.join(o['kind'] + '/' + o['metadata']['name'] for o in objs)}", once
        )

    def gone(self) -> None:
        self.kubectl("delete", "namespace", self.ns, "--ignore-not-found", "--wait=false")
        self.wait(
            "its namespace gone", lambda: self.ctx.kube.get("v1", "Namespace", self.ns) is None
        )

    def pod_of(self, name: str, claim: str, script: str, node: str) -> Obj:
        if self.block:
            return block_pod(name, self.ns, claim, script, node)
        return pod(name, self.ns, claim, script, node=node)

    def claim(self, name: str, **spec: Any) -> Obj:
        modes = ("ReadWriteOncePod",) if self.spec.kind == "rwop" else ("ReadWriteOnce",)
        extra = {"volumeMode": "Block"} if self.block else {}
        return pvc(name, self.ns, modes=modes, **extra, **spec)

    def steps(self) -> tuple[str, str]:
        """(checksum written, checksum read back)."""
        k = self.ctx.kube
        self.gone()  # a run of the same seed before
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}])
        self.apply(
            [
                self.claim("vol"),
                self.pod_of("writer", "vol", WRITE_DEVICE if self.block else WRITE_BLOB, self.x),
            ]
        )
        self.ready("writer")
        want = self.written("writer")
        source = "vol"
        if self.spec.kind == "snapshot":
            self.apply([_snapshot("snap", self.ns, "vol")])
            self.wait(
                "the snapshot ready",
                lambda: _ready(
                    k.get("snapshot.storage.k8s.io/v1", "VolumeSnapshot", "snap", self.ns)
                ),
            )
            self.apply([_from_snapshot("copy", self.ns, "snap")])
            source = "copy"
        elif self.spec.kind == "clone":
            self.apply(
                [self.claim("copy", dataSource={"kind": "PersistentVolumeClaim", "name": "vol"})]
            )
            source = "copy"
        if source == "vol":  # the claim itself, staged again on x or y
            self.kubectl("-n", self.ns, "delete", "pod", "writer", "--ignore-not-found")
            self.wait("the writer gone", lambda: k.pod(self.ns, "writer") is None)
        node = self.y if self.spec.move else self.x
        self.apply([self.pod_of("reader", source, "sleep 3600", node)])
        self.ready("reader")
        return want, self.read("reader")

    def cleanup(self) -> None:
        k = self.ctx.kube
        claims = self.wait(
            "its claims listed", lambda: [k.objects("v1", "PersistentVolumeClaim", self.ns)]
        )[0]
        pvs = [
            str((c.get("spec") or {}).get("volumeName"))
            for c in claims
            if (c.get("spec") or {}).get("volumeName")
        ]
        self.gone()
        self.wait(
            "its PVs gone", lambda: all(k.get("v1", "PersistentVolume", p) is None for p in pvs)
        )

    def run(self) -> Outcome:
        began = time.monotonic()
        out = Outcome(self.spec.index, self.spec.kind, "completed", 0.0)
        try:
            want, got = self.steps()
            if want != got:
                out.result, out.detail = "data-lost", f"wrote {want}, read {got}"
        except Failed as e:
            out.result, out.detail = "stuck", str(e)
        except Exception as e:  # a life's error is its outcome; the others go on
            out.result, out.detail = "error", f"{type(e).__name__}: {e}"
        try:
            self.cleanup()
        except Exception as e:  # what it leaves, the checks at rest find
            if out.result == "completed":
                out.result, out.detail = "stuck", f"cleanup: {e}"
        out.seconds = time.monotonic() - began
        return out
