"""A burst of claims in the cluster: N claims and N pods created at once (docs/benchmarks.md).

Against a cluster with the chart installed (KUBECONFIG, then `python -m bench.cluster_burst`):
every claim and its pod are created together from N threads; the run records when a watch first
saw each claim Bound and each pod Running, and gives the time from the first create call to all
Bound and to all Running. Then it reads the logs of every container of the driver's namespaces
since the burst began and counts the lines that tell of a refused call (UNAVAILABLE,
RESOURCE_EXHAUSTED and grpc's words for them): a sidecar that was refused retries with back-off,
which is the latency this measures. The claims and pods are deleted at the end, and waited for.

Nodes must have room: the chart's maxVolumesPerNode times the nodes must reach N.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch

from bench.cluster_latency import PodWatch, _claim, _clear, _delete_namespace, _pod
from bench.stats import percentile

# What a refused call looks like in the sidecars' and the kubelet's logs: the codes by name, and
# grpc's own messages for a refused stream and for the server-wide limit.
REFUSAL = re.compile(
    r"Unavailable|UNAVAILABLE|ResourceExhausted|RESOURCE_EXHAUSTED|RST_STREAM|"
    r"Concurrent RPC limit exceeded"
)


class ClaimWatch(threading.Thread):
    """The first time this process saw each claim of the namespace Bound."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        super().__init__(daemon=True)
        self.core, self.namespace = core, namespace
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(
                    self.core.list_namespaced_persistent_volume_claim,
                    self.namespace,
                    timeout_seconds=30,
                ):
                    pvc = ev["object"]
                    if pvc.status and pvc.status.phase == "Bound":
                        self.bound.setdefault(pvc.metadata.name, time.monotonic())
                    if self._stop.is_set():
                        break
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
                time.sleep(0.5)

    def wait(self, names: Sequence[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while not all(n in self.bound for n in names):
            if time.monotonic() > deadline:
                missing = [n for n in names if n not in self.bound]
                raise TimeoutError(f"claims not Bound after {timeout:.0f} s: {missing[:10]}")
            time.sleep(0.2)
        return {n: self.bound[n] for n in names}

    def stop(self) -> None:
        self._stop.set()


def refusals(
    core: client.CoreV1Api, namespaces: Sequence[str], since_s: int
) -> dict[str, list[str]]:
    """container (namespace/pod/container) -> the refusal lines its log holds from since_s ago."""
    found: dict[str, list[str]] = {}
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns).items:
            for c in pod.spec.containers:
                try:
                    text = core.read_namespaced_pod_log(
                        pod.metadata.name, ns, container=c.name, since_seconds=since_s
                    )
                except client.ApiException as e:
                    text = f"(no log: {e.reason})"
                lines = [line for line in text.splitlines() if REFUSAL.search(line)]
                found[f"{ns}/{pod.metadata.name}/{c.name}"] = lines
    return found


def burst(
    core: client.CoreV1Api, ns: str, storage_class: str, count: int, size: str
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    names = [f"burst-{tag}-{i}" for i in range(count)]
    claims, pods = ClaimWatch(core, ns), PodWatch(core, ns)
    began = time.monotonic()
    wall_began = time.time()

    def create(name: str) -> None:
        core.create_namespaced_persistent_volume_claim(ns, _claim(name, storage_class, size))
        core.create_namespaced_pod(ns, _pod(name, name, "sleep 100000"))

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bound = claims.wait(names, timeout=900)
        running = pods.wait(names, timeout=900)
    finally:
        claims.stop()
        pods.stop()
    to_bound = [bound[n] - began for n in names]
    to_running = [running[n] - began for n in names]
    result = {
        "count": count,
        "size": size,
        "began_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_began)),
        "all_bound_s": round(max(to_bound), 2),
        "all_running_s": round(max(to_running), 2),
        "bound_p50_s": round(percentile(to_bound, 50), 2),
        "running_p50_s": round(percentile(to_running, 50), 2),
        "running_p90_s": round(percentile(to_running, 90), 2),
    }
    _clear(core, ns, names, claims=True)
    result["since_s"] = int(time.time() - wall_began) + 5
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_burst", description=__doc__)
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    p.add_argument("--storage-class", default="csi-hostpath")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--size", default="64Mi")
    p.add_argument(
        "--driver-namespace",
        action="append",
        help="a namespace whose containers' logs are searched for refusals (default: csi-hostpath)",
    )
    p.add_argument("--out", type=Path, help="write the figures and the refusal lines as JSON here")
    args = p.parse_args(argv)
    config.load_kube_config(config_file=args.kubeconfig)
    core = client.CoreV1Api()
    ns = f"bench-burst-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        result = burst(core, ns, args.storage_class, args.count, args.size)
    finally:
        _delete_namespace(core, ns)
    lines = refusals(core, args.driver_namespace or ["csi-hostpath"], result["since_s"])
    result["refusal_lines"] = sum(len(v) for v in lines.values())
    result["refusals_by_container"] = {k: len(v) for k, v in lines.items() if v}
    print(json.dumps(result, indent=1), flush=True)
    for where, found in lines.items():
        for line in found[:5]:
            print(f"{where}: {line}", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({**result, "lines": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
