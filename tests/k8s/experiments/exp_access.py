"""a, b, c: who may use a volume and when it is made. A claim Bound while its pod waits for
something else (a Secret); RWO shared by two pods on one node, RWOP refused to a second pod by
the scheduler; WaitForFirstConsumer waiting for a pod."""

from __future__ import annotations

import base64

from tests.k8s.experiments.context import WFFC, Ctx, expect, experiment, log, pod, pvc
from tests.k8s.experiments.kube import Obj, condition, holds, pod_ready, until


@experiment("a", "claim Bound while the pod waits for a missing Secret, then Ready")
def missing_secret(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-a")
    k = ctx.kube
    k.apply(
        [
            pvc("data", ns),
            pod(
                "waits",
                ns,
                "data",
                "cat /secret/token > /data/seen && sleep 3600",
                volumes=[{"name": "secret", "secret": {"secretName": "late-secret"}}],
                mounts=[{"name": "secret", "mountPath": "/secret"}],
            ),
        ]
    )

    def bound_claim() -> Obj | None:
        c = k.pvc(ns, "data")
        return c if c and c["status"].get("phase") == "Bound" else None

    def mount_event() -> str | None:
        t = k.event_text(ns, "waits")
        return t if "late-secret" in t and "FailedMount" in t else None

    bound = until("claim data Bound", bound_claim, 120)
    event = until("a FailedMount event naming the Secret", mount_event, 120)
    log(f"  pod events: {event.strip().splitlines()[-1][:200]}")

    def creating() -> list[str] | None:
        # The kubelet may post the event before the pod's status: read the status until it
        # says why the pod waits.
        p = k.pod(ns, "waits") or {}
        waiting = [
            str(((s.get("state") or {}).get("waiting") or {}).get("reason"))
            for s in (p.get("status") or {}).get("containerStatuses") or []
        ]
        ok = (p.get("status") or {}).get("phase") == "Pending" and waiting == ["ContainerCreating"]
        return waiting if ok else None

    until("the pod waits in ContainerCreating", creating, 60)
    expect("the claim is Bound meanwhile", (k.pvc(ns, "data") or {})["status"]["phase"] == "Bound")
    k.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "late-secret", "namespace": ns},
                "data": {"token": base64.b64encode(b"s3cret").decode()},
            }
        ]
    )
    k.wait_pod_ready(ns, "waits")
    seen = k.exec(ns, "waits", ["cat", "/data/seen"])
    expect("the pod wrote the Secret into the volume", seen == "s3cret", seen)
    after = k.pvc(ns, "data") or {}
    same = (after["metadata"]["uid"], after["spec"]["volumeName"]) == (
        bound["metadata"]["uid"],
        bound["spec"]["volumeName"],
    )
    expect(
        "the claim untouched: same object, same volume",
        same and after["status"]["phase"] == "Bound",
    )


@experiment("b", "RWO: two pods on one node share; RWOP: the second pod is not scheduled")
def rwo_and_rwop(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-b")
    k = ctx.kube
    node = ctx.workers[0]
    k.apply(
        [
            pvc("shared", ns),
            pod("writer", ns, "shared", "echo persistent > /data/f && sleep 3600", node=node),
            pod("reader", ns, "shared", "sleep 3600", node=node),
        ]
    )
    k.wait_pod_ready(ns, "writer")
    k.wait_pod_ready(ns, "reader")
    got = until(
        "the reader reads the writer's file",
        lambda: k.exec(ns, "reader", ["cat", "/data/f"]).strip() == "persistent",
        30,
    )
    expect("both pods on one node, one RWO volume", bool(got))
    k.apply([pvc("only", ns, modes=("ReadWriteOncePod",)), pod("one", ns, "only", "sleep 3600")])
    k.wait_pod_ready(ns, "one")
    k.apply([pod("two", ns, "only", "sleep 3600")])

    def refused() -> str | None:
        c = condition(k.pod(ns, "two"), "PodScheduled")
        return str(c.get("message")) if c and c.get("status") == "False" else None

    why = until("the second RWOP pod refused by the scheduler", refused, 60)
    log(f"  scheduler: {why}")
    expect("the reason names ReadWriteOncePod", "ReadWriteOncePod" in why, why)
    holds(
        "the second pod Pending",
        lambda: (k.pod(ns, "two") or {})["status"].get("phase") == "Pending",
        10,
    )
    k.kubectl("-n", ns, "delete", "pod", "one", "--wait=true")
    k.wait_pod_ready(ns, "two")
    expect("then it starts", pod_ready(k.pod(ns, "two")))


@experiment("c", "WaitForFirstConsumer: the claim stays Pending until a pod uses it")
def wait_for_first_consumer(ctx: Ctx) -> None:
    ns = ctx.namespace("e2e-c")
    k = ctx.kube
    k.apply([pvc("late", ns, sc=WFFC)])
    holds(
        "the claim Pending without a pod",
        lambda: (k.pvc(ns, "late") or {}).get("status", {}).get("phase") == "Pending",
        12,
    )
    text = k.event_text(ns, "late")
    expect(
        "the claim says it waits for its first consumer",
        "WaitForFirstConsumer" in text or "first consumer" in text,
        text,
    )
    k.apply([pod("consumer", ns, "late", "sleep 3600")])
    p = k.wait_pod_ready(ns, "consumer")
    c = k.pvc(ns, "late") or {}
    selected = (c["metadata"].get("annotations") or {}).get("volume.kubernetes.io/selected-node")
    expect("the claim Bound", c["status"]["phase"] == "Bound")
    expect(
        "for the node the pod runs on",
        selected == p["spec"]["nodeName"],
        (selected, p["spec"]["nodeName"]),
    )
