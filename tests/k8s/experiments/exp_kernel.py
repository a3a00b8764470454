"""p: the nodes share one kernel. Every node's driver sees every loop device of the machine in
/sys/block, the other nodes' among them; in a node whose /dev is a copy made when it started (a
plain kind node), a device the kernel makes later has no node there until the driver makes one.

Where a node's /dev is its own copy, the nodes of the loop devices not bound at the experiment's
start are removed from it first (the kernel here had its devices before the nodes started, so the
copy had them all): the /dev of a node started before those devices existed. Forty claims,
twenty pods on each worker: every one Bound and published, each node's heartbeat
reporting exactly its own pods' volumes, each on a loop device backed by that volume's file. Then
one worker's node plugin is replaced while the other's twenty volumes stay published: the new
plugin adopts none of the other node's devices, detaches none, and reports none; the other node's
devices and pods are untouched. Deleting it all leaves no loop device of the pool."""

from __future__ import annotations

import hashlib
import json
import os
import re

from tests.k8s.experiments.context import Ctx, expect, experiment, log, pod, pvc
from tests.k8s.experiments.kube import Failed, pod_ready, until
from tests.k8s.experiments.nodes import host_loop_devices

CLAIMS = 40
# In a node: remove /dev/loopN of every loop device the kernel has that is not bound; print how
# many.
DROP_FREE_NODES = (
    "n=0; for d in /sys/block/loop*; do [ -e $d/loop/backing_file ] && continue;"
    " rm -f /dev/${d##*/} && n=$((n + 1)); done; echo $n"
)


def _node_key(node: str) -> str:
    # The driver's own key for a node ID (core/naming.py's node_key), the heartbeat's file name.
    return hashlib.sha256(node.encode()).hexdigest()[:16]


def _reported(ctx: Ctx, node: str) -> dict[str, str]:
    """Volume ID -> loop device, from the node's heartbeat in the shared pool."""
    found = {}
    folder = ctx.nodes.pool_dir / "nodes" / _node_key(node)
    for f in folder.glob("*.json") if folder.is_dir() else []:
        try:
            found[f.stem] = str(json.loads(f.read_text()).get("device") or "")
        except (OSError, ValueError):
            continue
    return found


def _backing(device: str) -> tuple[int, int] | None:
    """The (st_dev, st_ino) of the file behind /dev/loopN, as the host's kernel reports it. By
    inode, never by path: the kernel gives the path the attaching container saw."""
    for d in host_loop_devices():
        if os.path.basename(d.name) == os.path.basename(device):
            return d.back_dev, d.back_ino
    return None


def _loop_nodes(ctx: Ctx, node: str) -> set[str]:
    out = ctx.nodes.exec(node, ["sh", "-c", "ls /dev"])
    return {n for n in out.split() if re.fullmatch(r"loop\d+", n)}


@experiment("p", "one kernel: 40 claims on two nodes, no node adopts or reports another's")
def shared_kernel(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-p")
    k = ctx.kube
    a, b = ctx.workers[0], ctx.other(ctx.workers[0])
    host_dev = f"{os.stat('/dev').st_dev}:{os.stat('/dev').st_ino}"
    own_dev = {
        w: ctx.nodes.exec(w, ["stat", "-c", "%d:%i", "/dev"]).strip() != host_dev for w in (a, b)
    }
    for w in (a, b):
        if own_dev[w]:
            # A node's /dev of its own is a copy made when it started. Here the kernel had its
            # loop devices before the nodes did, so the copy has them all; a node started before
            # them would have none of the unbound ones: remove those, and every attach of this
            # experiment meets a device without a node, which the driver must make.
            gone = ctx.nodes.exec(w, ["sh", "-c", DROP_FREE_NODES]).strip()
            log(f"  {w}: /dev is its own; the nodes of {gone} unbound loop devices removed")
    at_start = {w: _loop_nodes(ctx, w) for w in (a, b)}
    log(f"  loop nodes at the start: { {w: len(v) for w, v in at_start.items()} }")
    objs = []
    for i in range(CLAIMS):
        node = (a, b)[i % 2]
        objs.append(pvc(f"c{i:02}", ns, size="16Mi"))
        objs.append(pod(f"p{i:02}", ns, f"c{i:02}", f"echo {node} > /data/who; sleep 3600", node))
    k.apply(objs)

    def all_ready() -> list[str] | None:
        pods = k.objects("v1", "Pod", ns)
        ready = [p for p in pods if pod_ready(p)]
        return [str(p["spec"]["nodeName"]) for p in ready] if len(ready) == CLAIMS else None

    placed = until(f"{CLAIMS} pods Ready", all_ready, 900, 5)
    expect("twenty on each worker", sorted(placed).count(a) == CLAIMS // 2, placed)
    handles = {f"p{i:02}": k.volume_handle(ns, f"c{i:02}") for i in range(CLAIMS)}
    on = {a: {handles[f"p{i:02}"] for i in range(0, CLAIMS, 2)},
          b: {handles[f"p{i:02}"] for i in range(1, CLAIMS, 2)}}  # fmt: skip
    reported = until(
        "each heartbeat reports its own twenty volumes",
        lambda: ({w: _reported(ctx, w) for w in (a, b)}
                 if all(set(_reported(ctx, w)) == on[w] for w in (a, b)) else None),
        120,
        5,
    )  # fmt: skip
    devices = {w: set(reported[w].values()) for w in (a, b)}
    expect("no device reported by both nodes", not devices[a] & devices[b], devices)
    expect("forty loop devices", len(devices[a] | devices[b]) == CLAIMS, devices)
    for w in (a, b):
        for vid, device in reported[w].items():
            files = [ctx.nodes.pool_dir / "volumes" / f"{vid}.img"]
            want = {(os.stat(f).st_dev, os.stat(f).st_ino) for f in files if f.exists()}
            if _backing(device) not in want:
                raise Failed(f"{w}'s {device} is not backed by {vid}'s file")
    log("  ok: every reported device is backed by its own volume's file")
    for w in (a, b):
        used = {os.path.basename(d) for d in devices[w]}
        made = used - at_start[w]
        log(f"  {w}: {len(used)} devices, {len(made)} of them had no node in its /dev at the start")
        expect(f"{w}'s /dev has a node for each of its devices", used <= _loop_nodes(ctx, w))
        if own_dev[w]:
            expect(f"{w}: more devices than it had nodes for", len(made) > 0, sorted(made))

    # Replace a's node plugin while b's twenty stay published.
    old = ctx.node_plugin(a)["metadata"]
    k.kubectl("-n", ctx.driver_ns, "delete", "pod", old["name"], "--wait=true", timeout=200)

    def new_plugin() -> bool:
        try:
            p = ctx.node_plugin(a)
        except Failed:
            return False
        return p["metadata"]["uid"] != old["uid"] and pod_ready(p)

    until(f"a new node plugin on {a}, Ready", new_plugin, 240, 3)
    until(
        f"{a}'s heartbeat reports its twenty again, and only them",
        lambda: set(_reported(ctx, a)) == on[a] or None,
        120,
        5,
    )
    after_b = _reported(ctx, b)
    expect(f"{b}'s volumes and devices unchanged", after_b == reported[b], after_b)
    for device in devices[b]:
        expect(f"{device} still attached", _backing(device) is not None)
    restarts = [
        sum(int(s.get("restartCount", 0)) for s in (p["status"].get("containerStatuses") or []))
        for p in k.objects("v1", "Pod", ns)
    ]
    expect("no pod restarted", not any(restarts), restarts)
    for name in ("p00", "p01"):
        who = k.exec(ns, name, ["cat", "/data/who"]).strip()
        expect(f"{name} still reads its file", who in (a, b), who)

    k.delete_namespace(ns, timeout=600)
    until(
        "no loop device of the pool left",
        lambda: not ctx.nodes.pool_loop_devices() or None,
        300,
        5,
    )
