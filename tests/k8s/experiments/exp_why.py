"""q: `kubectl csi-hostpath why` in a real cluster. Each of its eight cases is made for real and
the plugin's reason line checked, the plugin run through the real kubectl by a ServiceAccount
that holds only the chart's why-reader roles (and can't write): a claim waiting for its first
consumer; a claim larger than any pool; the pod waiting for a missing Secret while its storage
is done, then healthy; a ReadWriteOncePod conflict; a multi-attach that only the ledger refuses
(a second, ReadWriteMany PersistentVolume naming the same volume); the node holding a volume
gone (kubelet stopped, plugin killed), then force-detached, back, and fenced under its pod."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.k8s.experiments.context import WFFC, Ctx, expect, experiment, log, pod, pvc
from tests.k8s.experiments.kube import Failed, Obj, pod_ready, until
from tests.k8s.experiments.why_plugin import (
    READER,
    UNTIL_DEATH,
    as_json,
    block_pod,
    expected,
    line_of,
    reader_kubeconfig,
    reader_rbac,
    run_why,
    shadow,
)

NS = "e2e-q"
SHADOW = f"{NS}-shadow"
# What the plugin's user must not be able to do (`kubectl auth can-i` arguments).
WRITES_AND_SECRETS = (
    ("create", "pods"),
    ("create", "pods", "--subresource=exec"),
    ("delete", "persistentvolumeclaims"),
    ("get", "secrets"),
    ("patch", "volumeattachments"),
    ("watch", "pods"),
)


class Reader:
    """The plugin's user: its kubeconfig, and the plugin run with it."""

    def __init__(self, ctx: Ctx, workdir: Path) -> None:
        self.ctx = ctx
        ctx.kube.apply(reader_rbac(NS, ctx.release, ctx.driver_ns))
        token = ctx.kube.kubectl("-n", NS, "create", "token", READER, "--duration=2h").strip()
        admin = json.loads(ctx.kube.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
        self.kubeconfig = workdir / "why-reader.kubeconfig"
        self.kubeconfig.write_text(json.dumps(reader_kubeconfig(admin, token, NS)))

    def can(self, *argv: str) -> str:
        kubectl = [self.ctx.kube.kubectl_path, "--kubeconfig", str(self.kubeconfig)]
        done = subprocess.run(
            [*kubectl, "auth", "can-i", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        return done.stdout.strip()

    def why(self, target: str, case: str, timeout: float = 180, **names: str) -> str:
        """Run the plugin until its reason line holds the case's words; its whole output."""
        words = expected(case, NS, **names)
        seen = [""]

        def says() -> str | None:
            seen[0] = run_why(self.ctx.kube.kubectl_path, self.kubeconfig, target)
            reason = line_of(seen[0], "reason")
            return seen[0] if all(w in reason for w in words) else None

        try:
            out = until(f"`why {target}` to say {words}", says, timeout, 3)
        except Failed as e:
            raise Failed(f"{e}; it said:\n{seen[0]}") from None
        log(f"  why {target}: {line_of(out, 'reason')}")
        return out


@experiment("q", "kubectl csi-hostpath why: eight cases, each its one reason, as a read-only user")
def why_cases(ctx: Ctx) -> None:
    ctx.namespace(NS)
    workdir = Path(tempfile.mkdtemp(prefix="e2e-q-"))
    try:
        reader = Reader(ctx, workdir)
        for refused in WRITES_AND_SECRETS:
            expect(f"the reader can't {' '.join(refused)}", reader.can(*refused) == "no")
        expect("the reader can list pods everywhere", reader.can("list", "pods", "-A") == "yes")
        _first_consumer_and_capacity(ctx, reader)
        _secret_then_healthy(ctx, reader)
        _rwop(ctx, reader)
        _multi_attach(ctx, reader)
        _node_gone_then_fenced(ctx, reader)
    finally:
        k = ctx.kube
        k.kubectl("-n", NS, "delete", "pod", "--all", "--wait=true", "--timeout=120s", check=False)
        k.kubectl("-n", NS, "delete", "pvc", "shadow", "--ignore-not-found", check=False)
        k.kubectl("delete", "pv", SHADOW, "--ignore-not-found", "--wait=false", check=False)
        binding = f"{NS}-{READER}"
        k.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)
        k.kubectl(
            "-n", ctx.driver_ns, "delete", "rolebinding", binding, "--ignore-not-found", check=False
        )
        shutil.rmtree(workdir, ignore_errors=True)


def _first_consumer_and_capacity(ctx: Ctx, reader: Reader) -> None:
    k = ctx.kube
    k.apply([pvc("late", NS, sc=WFFC)])
    reader.why("pvc/late", "first-consumer")
    k.apply([pvc("huge", NS, size="100Ti"), pod("wants-huge", NS, "huge", "sleep 3600")])
    reader.why("pod/wants-huge", "no-capacity")
    k.kubectl("-n", NS, "delete", "pod", "wants-huge", "--wait=true")
    k.kubectl("-n", NS, "delete", "pvc", "huge", "late", "--wait=false")


def _secret_then_healthy(ctx: Ctx, reader: Reader) -> None:
    k = ctx.kube
    node = ctx.workers[0]
    k.apply(
        [
            pvc("data", NS),
            pod(
                "waits",
                NS,
                "data",
                "sleep 3600",
                node=node,
                volumes=[{"name": "secret", "secret": {"secretName": "late-secret"}}],
                mounts=[{"name": "secret", "mountPath": "/secret"}],
            ),
        ]
    )
    out = reader.why("pod/waits", "missing-secret")
    expect("its five phases are each done", out.count(" done ") >= 5, out)
    secret = base64.b64encode(b"s3cret").decode()
    k.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "late-secret", "namespace": NS},
                "data": {"token": secret},
            }
        ]
    )
    k.wait_pod_ready(NS, "waits")
    reader.why("pod/waits", "healthy")
    doc = as_json(run_why(k.kubectl_path, reader.kubeconfig, "pod/waits", "-o", "json"))
    phases = [p["state"] for c in doc["claims"] for p in c["phases"]]
    expect(
        "-o json: schema v1, nothing blocking, five phases done",
        doc["schema"] == "csi-hostpath.why/v1"
        and doc["blocking"]["code"] == "none"
        and phases == ["done"] * 5
        and doc["driver"][0]["available"] is True,
        doc["blocking"],
    )
    k.kubectl("-n", NS, "delete", "pod", "waits", "--wait=true")


def _rwop(ctx: Ctx, reader: Reader) -> None:
    k = ctx.kube
    k.apply([pvc("only", NS, modes=("ReadWriteOncePod",)), pod("one", NS, "only", "sleep 3600")])
    k.wait_pod_ready(NS, "one")
    k.apply([pod("two", NS, "only", "sleep 3600")])
    reader.why("pod/two", "rwop-conflict")
    k.kubectl("-n", NS, "delete", "pod", "one", "two", "--wait=true")


def _multi_attach(ctx: Ctx, reader: Reader) -> None:
    k = ctx.kube
    a = ctx.workers[0]
    b = ctx.other(a)
    k.apply([pvc("disk", NS, volumeMode="Block"), block_pod("first", NS, "disk", a)])
    k.wait_pod_ready(NS, "first")
    original = k.get("v1", "PersistentVolume", (k.pvc(NS, "disk") or {})["spec"]["volumeName"])
    if original is None:
        raise Failed("claim disk has no PersistentVolume")
    k.apply(shadow(original, SHADOW, NS, "shadow"))
    k.apply([block_pod("second", NS, "shadow", b)])
    out = reader.why("pod/second", "multi-attach-ledger", a=a, b=b)
    expect("the next step names both PersistentVolumes", SHADOW in line_of(out, "next"), out)
    k.kubectl("-n", NS, "delete", "pod", "second", "first", "--wait=true")
    k.kubectl("-n", NS, "delete", "pvc", "shadow", "--wait=true")
    for name in refused_attachments(k.objects("storage.k8s.io/v1", "VolumeAttachment"), SHADOW):
        k.kubectl("delete", "volumeattachment", name, "--ignore-not-found", "--wait=true")
    k.kubectl("delete", "pv", SHADOW, "--wait=true")


def refused_attachments(attachments: list[Obj], pv: str) -> list[str]:
    """The VolumeAttachments of a PersistentVolume that never attached.

    The shadow shares its volume handle with the original claim's volume, and the attach-detach
    controller knows a volume by its handle: once both pods are gone it detaches the one it saw
    attached, on A, and may never delete the refused attachment to B, whose attacher finalizer then
    keeps the shadow from being deleted (seen once on kind). Deleting it is the admin's cleanup of
    a hand-made PersistentVolume: the attacher calls ControllerUnpublishVolume for B, which the
    ledger answers OK, as B holds nothing."""
    return [
        str(a["metadata"]["name"])
        for a in attachments
        if (a["spec"].get("source") or {}).get("persistentVolumeName") == pv
        and not (a.get("status") or {}).get("attached")
    ]


def _node_gone_then_fenced(ctx: Ctx, reader: Reader) -> None:
    k = ctx.kube
    b = ctx.controller_pod()["spec"]["nodeName"]
    a = ctx.other(b)  # not the controller's node: the ledger stays reachable
    doomed = pod("doomed", NS, "survivor", "sleep 3600", node=a)
    doomed["spec"]["tolerations"] = UNTIL_DEATH
    k.apply([pvc("survivor", NS), doomed])
    k.wait_pod_ready(NS, "doomed")
    vol = k.volume_handle(NS, "survivor")
    pv = (k.pvc(NS, "survivor") or {})["spec"]["volumeName"]
    kubelet_down = False
    try:
        log(f"  stopping {a}'s kubelet and killing its node plugin ({b} runs the controller)")
        kubelet_down = True
        ctx.take_node_away(a)
        until(f"{a} NotReady", lambda: not ctx.node_ready(a), 180, 3)
        k.apply([pod("rescue", NS, "survivor", "sleep 3600", node=b)])
        out = reader.why("pod/rescue", "holder-gone", a=a, pv=pv)
        step, risk, owner = (line_of(out, x) for x in ("next", "risk", "owner"))
        expect("waiting comes first", step.startswith("wait: ") and "safe default" in step, step)
        expect(
            "then the force-detach command",
            f"ledger force-detach {vol} --node {a}" in step and "out-of-service" in step,
            step,
        )
        expect("the bet, and who owns it", "corrupt" in risk and "operator" in owner, out)
        started = time.monotonic()
        until(
            f"the force-detach of {a} (refused while its heartbeat is younger than the grace)",
            lambda: ctx.ledger("force-detach", vol, "--node", a, "--reason", "e2e-q: stopped"),
            240,
            5,
        )
        log(f"  force-detached {a} after {time.monotonic() - started:.0f} s more")
        ctx.nodes.start_kubelet(a)
        kubelet_down = False
        until(
            f"{a}'s plugin fences: a fenced row for {a}",
            lambda: any(r[2] == "fenced" and r[4] == a for r in ctx.audit(vol)),
            300,
            3,
        )
        reader.why("pod/doomed", "fenced", a=a, pv=pv)
        k.kubectl("-n", NS, "delete", "pod", "doomed", "--wait=true", "--timeout=180s")
        k.wait_pod_ready(NS, "rescue", 400)
        reader.why("pod/rescue", "healthy")
    finally:
        if kubelet_down:
            ctx.nodes.start_kubelet(a)
        until(f"{a} Ready again", lambda: ctx.node_ready(a), 180, 3)
        until(f"{a}'s node plugin Ready again", lambda: pod_ready(ctx.node_plugin(a)), 180, 3)
