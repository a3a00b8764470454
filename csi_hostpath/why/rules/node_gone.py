"""A node that lost its hold on a volume: gone (NotReady, its plugin silent) while a pod
elsewhere waits for the volume, where the next step is a bet with an owner; or back after the
hold was revoked, its plugin having fenced the volume under a running container.

Pure, like the rest of `why`'s core (why/rules/blocker.py calls these).
"""

from __future__ import annotations

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import FENCED, REVOCATIONS, Blocker, ClaimPhases, Observed
from csi_hostpath.why.rules.kube_fields import Obj
from csi_hostpath.why.rules.phases import holder, staging

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"


def exec_prefix(obs: Observed) -> str:
    ns = obs.driver_namespace or "<driver namespace>"
    pod = obs.driver_pod or "<controller pod>"
    return f"kubectl -n {ns} exec {pod} -c csi-hostpath -- csi-hostpath"


def holder_gone(
    obs: Observed,
    c: ClaimPhases,
    node: str,
    other: str,
    held: Obj | None,
    ready: str,
    since: float | None,
) -> Blocker:
    down = ready in ("False", "Unknown")
    state = f"is NotReady (since {kf.clock(since)})" if down else "is Ready"
    age = held.get("heartbeat_age_seconds") if held else None
    plugin = (
        f" and its plugin has been silent for {kf.human_seconds(float(age))}"
        if isinstance(age, int | float)
        else " and its plugin was never heard from"
        if held is not None
        else ""
    )
    handle = c.volume_handle or "VOLUME"
    return Blocker(
        "holder-node-gone",
        f"node {other}, which holds volume {c.persistent_volume}, {state}{plugin}: Kubernetes "
        f"won't attach the volume to {node} until {other} lets go",
        f"wait: if {other} comes back it lets go by itself, and waiting is the safe default. If "
        f"{other} is gone for good (powered off, never to write again): kubectl taint node "
        f"{other} {OUT_OF_SERVICE} (Kubernetes detaches it; the ledger records a revoke). The "
        f"driver's own force-detach, for a hold no VolumeAttachment backs: {exec_prefix(obs)} "
        f"ledger force-detach {handle} --node {other} --reason '...'",
        "attach",
        c.claim,
        risk=f"the bet is that {other} no longer writes to the volume; if it is only cut off "
        "and still writing, two nodes write one filesystem and corrupt it, and when it comes "
        "back its plugin fences the volume and what it wrote after the detach is lost",
        owner=f"whoever can confirm that {other} is powered off or cut off from its disk for "
        "good: the cluster's operator, not the pod's owner (docs/kind.md, 'A node that is gone')",
    )


def fenced(obs: Observed, claims: tuple[ClaimPhases, ...]) -> Blocker | None:
    """A node that came back after its hold was revoked has fenced the volume: a container
    started before the fence still has the shut-down filesystem."""
    pod = obs.pod
    node = kf.text(pod, "spec", "nodeName")
    started = kf.container_started(pod)
    if pod is None or not node or started is None or kf.is_finished(pod):
        return None
    for c in claims:
        view = obs.view(c.volume_handle)
        audit = list((view or {}).get("audit") or [])
        fences = [a for a in audit if a.get("action") == FENCED and a.get("node") == node]
        fence = next((a for a in reversed(fences) if float(a.get("at", 0)) >= started), None)
        if fence is None:
            continue
        revoked = [
            a
            for a in audit
            if a.get("action") in REVOCATIONS
            and a.get("node") == node
            and float(a.get("at", 0)) <= float(fence["at"])
        ]
        last = revoked[-1] if revoked else None
        why = f"{last['action']} at {kf.clock(last.get('at'))}" if last else "revoked"
        restaged = staging(view, node)
        again = (
            f"; {node} holds it again under generation {restaged.get('generation')}, but only a "
            "new container sees that"
            if restaged is not None and holder(view, node) is not None
            else ""
        )
        return Blocker(
            "fenced",
            f"node {node} came back after its hold on {c.persistent_volume} was revoked ({why});"
            f" its plugin fenced the volume at {kf.clock(fence.get('at'))}, so the filesystem this "
            f"pod's container has is shut down and its writes fail{again}",
            f"delete pod {obs.namespace}/{kf.name(pod)} (its owner makes a new one): the new pod "
            "gets the volume under a new generation and reads what reached the disk before the "
            "fence; what this pod wrote after the revocation is lost",
            "publish",
            c.claim,
        )
    return None
