"""d, e, k: a volume and its nodes. The pod moves to another node and the data with it; a node is
lost (kubelet and plugin stopped, its pod still writing) and Kubernetes' out-of-service taint
moves the volume, and the node fences when its plugin comes back; the node plugin's container
killed with SIGKILL under writing pods, which keep their data while it comes back and takes its
volumes up again."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid

from tests.k8s.experiments.context import Ctx, expect, experiment, log, pod, pvc
from tests.k8s.experiments.kube import holds, pod_ready, until

WRITER = (
    "i=0; while true; do i=$((i+1)); "
    'if echo "line $i $(date +%T)" >> /data/log && sync; then :; else echo "FAIL $i"; fi; '
    "sleep 1; done"
)


def _lines(ctx: Ctx, ns: str, name: str) -> int:
    return len(ctx.kube.exec(ns, name, ["cat", "/data/log"]).splitlines())


def _attachments(ctx: Ctx, pv: str) -> list[str]:
    return [
        str(a["spec"]["nodeName"])
        for a in ctx.kube.objects("storage.k8s.io/v1", "VolumeAttachment")
        if (a["spec"].get("source") or {}).get("persistentVolumeName") == pv
    ]


def _actions(rows: list[list[str]]) -> list[tuple[str, str, int]]:
    """(action, node, generation) of each audit row."""
    return [(r[2], r[4], int(r[5]) if r[5].isdigit() else -1) for r in rows]


@experiment("d", "move: the pod leaves node A for B with its data; the audit shows the hand-over")
def move(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-d")
    k = ctx.kube
    a = ctx.workers[0]
    b = ctx.other(a)
    k.apply(
        [
            pvc("moving", ns),
            pod("mover-1", ns, "moving", f"echo written-on-{a} > /data/f && sleep 3600", node=a),
        ]
    )
    k.wait_pod_ready(ns, "mover-1")
    vol = k.volume_handle(ns, "moving")
    pv = (k.pvc(ns, "moving") or {})["spec"]["volumeName"]
    expect(f"the ledger: {a} holds the volume", a in ctx.ledger("list", "--volume", vol))
    k.kubectl("cordon", a)
    try:
        k.kubectl("-n", ns, "delete", "pod", "mover-1", "--wait=true")
        until("the VolumeAttachment to A gone", lambda: a not in _attachments(ctx, pv), 120)
        k.apply([pod("mover-2", ns, "moving", "cat /data/f; sleep 3600")])
        p = k.wait_pod_ready(ns, "mover-2")
    finally:
        k.kubectl("uncordon", a)
    expect("the new pod runs on B", p["spec"]["nodeName"] == b, p["spec"]["nodeName"])
    data = k.exec(ns, "mover-2", ["cat", "/data/f"]).strip()
    expect("it reads what A wrote", data == f"written-on-{a}", data)
    rows = _actions(ctx.audit(vol))
    log(f"  audit: {rows}")
    pub_a = [g for act, n, g in rows if act == "publish" and n == a]
    unpub_a = [i for i, (act, n, _) in enumerate(rows) if act == "unpublish" and n == a]
    pub_b = [(i, g) for i, (act, n, g) in enumerate(rows) if act == "publish" and n == b]
    expect(
        "the audit: published to A, released by A, then published to B with a newer generation",
        bool(pub_a and unpub_a and pub_b)
        and pub_b[-1][0] > unpub_a[-1]
        and pub_b[-1][1] > pub_a[-1],
        rows,
    )


class Probe:
    """A writer of our own inside a node, in the pod's mount (its cwd keeps the filesystem even
    after a lazy unmount): what a partitioned node's pod would keep doing. Each line says
    whether one append-and-sync worked."""

    def __init__(self, ctx: Ctx, node: str, directory: str) -> None:
        self.nodes, self.node = ctx.nodes, node
        # Names this writer's shell on its node's command lines, for stop.
        self.marker = f"csihp-probe-{uuid.uuid4().hex}"
        script = (
            f"m={self.marker}; "
            f"cd {directory} || exit 1; i=0; while true; do i=$((i+1)); "
            "if echo probe-$i >> probe 2>/dev/null && sync probe 2>/dev/null; "
            "then echo ok $i; else echo FAIL $i; fi; "
            "sleep 1; done"
        )
        self.proc = ctx.nodes.spawn(node, ["sh", "-c", script])
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def failing(self) -> bool:
        return bool(self.lines) and self.lines[-1].startswith("FAIL")

    def stop(self) -> None:
        """Kill the writer in its node too: killing `docker exec` leaves the process it started
        running, and its cwd would keep the lazily unmounted filesystem, and so its loop
        device, alive."""
        with contextlib.suppress(Exception):  # pkill exits 1 when the writer is gone already
            self.nodes.exec(self.node, ["pkill", "-9", "-f", self.marker], 30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


TAINT = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


@experiment("e", "lost node: stuck until the out-of-service taint, data on B, A fences on return")
def lost_node(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-e")
    k = ctx.kube
    b = ctx.controller_pod()["spec"]["nodeName"]
    a = ctx.other(b)  # not the controller's node: the ledger stays reachable
    k.apply([pvc("survivor", ns), pod("doomed", ns, "survivor", WRITER, node=a)])
    doomed = k.wait_pod_ready(ns, "doomed")
    vol = k.volume_handle(ns, "survivor")
    pv = (k.pvc(ns, "survivor") or {})["spec"]["volumeName"]
    until("doomed has written", lambda: _lines(ctx, ns, "doomed") >= 3, 30)
    mount = (
        f"/var/lib/kubelet/pods/{doomed['metadata']['uid']}/volumes/kubernetes.io~csi/{pv}/mount"
    )
    probe: Probe | None = None
    kubelet_down = False
    tainted = False
    try:
        log(f"  stopping {a}'s kubelet and killing its node plugin ({b} runs the controller)")
        kubelet_down = True
        ctx.take_node_away(a)
        probe = Probe(ctx, a, mount)
        until(f"{a} NotReady", lambda: not ctx.node_ready(a), 180, 3)
        k.apply([pod("rescue", ns, "survivor", "tail -n 3 /data/log; sleep 3600", node=b)])
        holds(
            "the replacement stuck while A can't be reached",
            lambda: not pod_ready(k.pod(ns, "rescue")),
            30,
        )
        expect("A's VolumeAttachment stays", a in _attachments(ctx, pv), _attachments(ctx, pv))
        log(f"  rescue events: {k.event_text(ns, 'rescue')[-300:]}")
        expect(
            "A's stopped node still writes (probe)",
            bool(probe.lines) and not probe.failing(),
            probe.lines[-3:],
        )
        k.kubectl("taint", "node", a, TAINT)
        tainted = True
        k.wait_gone("v1", "Pod", "doomed", ns, 240)
        k.wait_pod_ready(ns, "rescue", 300)
        got = k.exec(ns, "rescue", ["cat", "/data/log"]).splitlines()
        expect(
            "the replacement on B reads what doomed wrote",
            len(got) >= 3 and got[0].startswith("line 1 "),
            got[:2],
        )
        rows = _actions(ctx.audit(vol))
        expect(
            "the audit: A's hold revoked (Kubernetes' force-detach)",
            any(act == "revoke" and n == a for act, n, _ in rows),
            rows,
        )
        ctx.nodes.start_kubelet(a)
        kubelet_down = False
        until(
            "A's plugin fences: a fenced row for A",
            lambda: any(act == "fenced" and n == a for act, n, _ in _actions(ctx.audit(vol))),
            240,
            3,
        )
        until("A's writes fail after the fence", probe.failing, 60)
        log(f"  probe on A: ... {probe.lines[-4:]}")
        log(f"  audit: {_actions(ctx.audit(vol))}")
        still = k.exec(ns, "rescue", ["cat", "/data/log"]).splitlines()
        expect("B's copy is intact", still[: len(got)] == got, still[-2:])
    finally:
        if probe is not None:
            probe.stop()
        if kubelet_down:
            ctx.nodes.start_kubelet(a)
        if tainted:
            k.kubectl("taint", "node", a, TAINT + "-", check=False)
        until(f"{a} Ready again", lambda: ctx.node_ready(a), 180, 3)
        until(f"{a}'s node plugin Ready again", lambda: pod_ready(ctx.node_plugin(a)), 180, 3)


def _loop_of(ctx: Ctx, vol: str) -> list[str]:
    f = ctx.nodes.pool_dir / "volumes" / f"{vol}.img"
    try:
        st = f.stat()
    except FileNotFoundError:
        return []
    return [
        d.name
        for d in ctx.nodes.pool_loop_devices()
        if (d.back_dev, d.back_ino) == (st.st_dev, st.st_ino)
    ]


@experiment("k", "kill -9 of the node plugin under writing pods: data kept, volumes re-adopted")
def plugin_killed(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-k")
    k = ctx.kube
    x = ctx.workers[0]
    k.apply(
        [
            pvc("one", ns),
            pvc("two", ns),
            pod("w1", ns, "one", WRITER, node=x),
            pod("w2", ns, "two", WRITER, node=x),
        ]
    )
    for name in ("w1", "w2"):
        k.wait_pod_ready(ns, name)
    vols = [k.volume_handle(ns, c) for c in ("one", "two")]
    pvs = [(k.pvc(ns, c) or {})["spec"]["volumeName"] for c in ("one", "two")]
    plugin = ctx.node_plugin(x)
    status = next(s for s in plugin["status"]["containerStatuses"] if s["name"] == "csi-hostpath")
    before = {n: _lines(ctx, ns, n) for n in ("w1", "w2")}
    ctx.nodes.kill_container(x, status["containerID"])
    log(f"  SIGKILL to {x}'s node plugin (restarts so far: {status['restartCount']})")

    def restarted() -> bool:
        p = ctx.node_plugin(x)
        s = next(s for s in p["status"]["containerStatuses"] if s["name"] == "csi-hostpath")
        return int(s["restartCount"]) > int(status["restartCount"]) and pod_ready(p)

    until("the node plugin restarted and Ready", restarted, 180, 2)
    after = {n: _lines(ctx, ns, n) for n in ("w1", "w2")}
    expect(
        "the pods kept writing through it",
        all(after[n] > before[n] for n in after),
        (before, after),
    )
    for n in ("w1", "w2"):
        p = k.pod(ns, n) or {}
        log_text = k.exec(ns, n, ["cat", "/data/log"])
        expect(
            f"{n} Ready, never restarted, no failed write",
            pod_ready(p)
            and p["status"]["containerStatuses"][0]["restartCount"] == 0
            and "FAIL" not in k.logs(ns, n)
            and log_text.startswith("line 1 "),
            p["status"].get("phase"),
        )
    # Taking the volumes down goes through the new process: it must know them as its own.
    k.kubectl("-n", ns, "delete", "pod", "w1", "w2", "--wait=true")
    until("both VolumeAttachments gone", lambda: not any(_attachments(ctx, pv) for pv in pvs), 120)
    mounts = [m for m in ctx.nodes.csi_mounts(x) if any(pv in m for pv in pvs)]
    expect("no mount of either volume left on the node", not mounts, mounts)
    loops = [d for v in vols for d in _loop_of(ctx, v)]
    expect("no loop device of either volume left", not loops, loops)
