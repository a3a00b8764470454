"""In-cluster latency of the driver, as a user of the cluster feels it (docs/benchmarks.md).

Against a cluster with the chart installed (`make k8s-bench`, or KUBECONFIG and
`python -m bench.cluster_latency`):

- claim created -> pod Running: a PersistentVolumeClaim and a pod that mounts it, created
  together; the time from the claim's create call until the pod's phase is Running, as a watch
  sees it. 20 pairs one after another (each waits for the one before), then 20 at once.
- the floor, in the same run: the same pods with an emptyDir in place of the claim (no
  provisioner, attacher or CSI call), 20 one after another and 20 at once; each claim figure is
  also given as a ratio to it (what a CSI volume adds to a pod's start).
- snapshot -> restored claim Bound: a 1 GiB claim with 100 MiB written by a pod, a
  VolumeSnapshot of it, and a claim restored from it; the time from the snapshot's create call
  until the restored claim is Bound (its volume provisioned from the snapshot's data).

Each figure is wall-clock time through the API server, the scheduler, the sidecars, the kubelet
and the driver, on this machine; compare figures of one run, never against another machine's.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch

from bench.stats import percentile

IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
SNAPSHOT_GROUP, SNAPSHOT_VERSION = "snapshot.storage.k8s.io", "v1"


def _claim(name: str, storage_class: str, size: str, source: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": size}},
    }
    if source:
        spec["dataSource"] = {
            "apiGroup": SNAPSHOT_GROUP,
            "kind": "VolumeSnapshot",
            "name": source,
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def _pod(name: str, claim: str | None, command: str) -> dict[str, Any]:
    """A busybox pod with /data from the claim, or from an emptyDir when claim is None."""
    volume: dict[str, Any] = (
        {"name": "v", "persistentVolumeClaim": {"claimName": claim}}
        if claim
        else {"name": "v", "emptyDir": {}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "latency"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                    "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                }
            ],
            "volumes": [volume],
        },
    }


class PodWatch:
    """The first time this process saw each pod of the namespace Running (or Succeeded)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.running: dict[str, float] = {}
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(
                    self.core.list_namespaced_pod, self.namespace, timeout_seconds=30
                ):
                    pod = ev["object"]
                    if pod.status and pod.status.phase in ("Running", "Succeeded"):
                        with self.cond:
                            self.running.setdefault(pod.metadata.name, time.monotonic())
                            self.cond.notify_all()
                    if self._stop.is_set():
                        break
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
                # a dropped watch: start another
                time.sleep(0.5)

    def wait(self, names: Sequence[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not all(n in self.running for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in self.running]
                    raise TimeoutError(f"pods not Running after {timeout:.0f} s: {missing}")
                self.cond.wait(min(left, 1.0))
            return {n: self.running[n] for n in names}

    def stop(self) -> None:
        self._stop.set()


def _wait_for(what: str, check: Callable[[], bool], timeout: float, every: float = 0.1) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(every)
    raise TimeoutError(f"{what} after {timeout:.0f} s")


def claim_to_running(
    core: client.CoreV1Api,
    pods: PodWatch,
    ns: str,
    storage_class: str | None,
    count: int,
    at_once: bool,
) -> list[float]:
    """Seconds from each claim's create call to its pod Running; with storage_class None, the
    floor: each pod's create call to Running, with an emptyDir and no claim."""
    kind = "claim" if storage_class else "bare"
    prefix = f"{kind}-{'par' if at_once else 'seq'}-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i}" for i in range(count)]
    started: dict[str, float] = {}

    def create(name: str) -> None:
        started[name] = time.monotonic()
        if storage_class:
            core.create_namespaced_persistent_volume_claim(ns, _claim(name, storage_class, "64Mi"))
        core.create_namespaced_pod(ns, _pod(name, name if storage_class else None, "sleep 100000"))

    if at_once:
        threads = [threading.Thread(target=create, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ran = pods.wait(names, timeout=600)
    else:
        ran = {}
        for name in names:
            create(name)
            ran.update(pods.wait([name], timeout=300))
    took = [ran[n] - started[n] for n in names]
    _clear(core, ns, names, claims=storage_class is not None)
    return took


def _clear(core: client.CoreV1Api, ns: str, names: Sequence[str], claims: bool) -> None:
    """Delete a set's pods (and claims), and wait until they are gone: a node takes only
    maxVolumesPerNode volumes (16 in the e2e values), which the next set must find free."""
    for name in names:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        if claims:
            core.delete_namespaced_persistent_volume_claim(name, ns)

    def gone() -> bool:
        left = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
        if claims:
            left |= {
                c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items
            }
        return not left & set(names)

    _wait_for(f"{len(names)} pods and their claims not deleted", gone, 600, every=0.5)


def snapshot_to_bound(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    pods: PodWatch,
    ns: str,
    storage_class: str,
    snapshot_class: str,
) -> float:
    tag = uuid.uuid4().hex[:6]
    source, writer, snap, restored = f"src-{tag}", f"writer-{tag}", f"snap-{tag}", f"rst-{tag}"
    core.create_namespaced_persistent_volume_claim(ns, _claim(source, storage_class, "1Gi"))
    # 100 MiB of data that does not compress or dedupe, flushed before the pod says it is done.
    core.create_namespaced_pod(
        ns, _pod(writer, source, "dd if=/dev/urandom of=/data/blob bs=1M count=100 && sync")
    )

    def finished() -> bool:
        phase = core.read_namespaced_pod(writer, ns).status.phase
        if phase == "Failed":
            raise RuntimeError(f"the writer pod {writer} failed")
        return bool(phase == "Succeeded")

    _wait_for("the writer pod did not finish", finished, 600, every=0.5)
    start = time.monotonic()
    custom.create_namespaced_custom_object(
        SNAPSHOT_GROUP,
        SNAPSHOT_VERSION,
        ns,
        "volumesnapshots",
        {
            "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
            "kind": "VolumeSnapshot",
            "metadata": {"name": snap},
            "spec": {
                "volumeSnapshotClassName": snapshot_class,
                "source": {"persistentVolumeClaimName": source},
            },
        },
    )
    core.create_namespaced_persistent_volume_claim(
        ns, _claim(restored, storage_class, "1Gi", source=snap)
    )
    bound = _wait_for(
        "the restored claim is not Bound",
        lambda: core.read_namespaced_persistent_volume_claim(restored, ns).status.phase == "Bound",
        600,
    )
    return bound - start


def _figures(samples: Sequence[float]) -> dict[str, float]:
    return {
        "p50_s": round(percentile(samples, 50), 3),
        "p90_s": round(percentile(samples, 90), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "n": len(samples),
    }


def _ratios(ours: Sequence[float], floor: Sequence[float]) -> dict[str, float]:
    return {
        f"{q}_ratio": round(percentile(ours, n) / percentile(floor, n), 2)
        for q, n in (("p50", 50), ("p90", 90))
    }


def _delete_namespace(core: client.CoreV1Api, ns: str) -> None:
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except client.ApiException as e:
            return bool(e.status == 404)
        return False

    _wait_for(f"namespace {ns} not deleted", gone, 600, every=1)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_latency", description=__doc__)
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG")
    p.add_argument("--storage-class", default="csi-hostpath")
    p.add_argument("--snapshot-class", default="csi-hostpath-snapclass")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1, help="repeat the whole set this many times")
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="leave out snapshot -> restored Bound (a class whose driver takes no snapshots)",
    )
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    config.load_kube_config(config_file=args.kubeconfig)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    results: dict[str, Any] = {"storage_class": args.storage_class, "rounds": []}
    for r in range(args.rounds):
        ns = f"bench-latency-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        pods = PodWatch(core, ns)
        try:
            bare_seq = claim_to_running(core, pods, ns, None, args.count, at_once=False)
            seq = claim_to_running(core, pods, ns, args.storage_class, args.count, at_once=False)
            bare_par = claim_to_running(core, pods, ns, None, args.count, at_once=True)
            par = claim_to_running(core, pods, ns, args.storage_class, args.count, at_once=True)
            snap = (
                None
                if args.no_snapshot
                else snapshot_to_bound(
                    core, custom, pods, ns, args.storage_class, args.snapshot_class
                )
            )
        finally:
            pods.stop()
            _delete_namespace(core, ns)
        one = {
            "claim_to_running_one_after_another": _figures(seq),
            "claim_to_running_at_once": _figures(par),
            "emptydir_pod_to_running_one_after_another": _figures(bare_seq),
            "emptydir_pod_to_running_at_once": _figures(bare_par),
            "one_after_another_vs_emptydir": _ratios(seq, bare_seq),
            "at_once_vs_emptydir": _ratios(par, bare_par),
            "snapshot_to_restored_bound_s": None if snap is None else round(snap, 3),
        }
        results["rounds"].append(one)
        print(f"round {r + 1}: {json.dumps(one)}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
