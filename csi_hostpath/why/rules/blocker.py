"""The one reason a pod (or a claim) waits, in a sentence, and the next step: `diagnose` joins
the phases of each claim (why/rules/phases.py) with the pod, the nodes and the driver's ledger,
and picks the first thing that blocks, in the order the phases run.

Where the next step is a bet (taking a volume away from a node nobody can reach), the answer
says what is bet and who must own it: waiting stays the default (docs/kind.md, "A node that is
gone").
"""

from __future__ import annotations

from collections.abc import Callable

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import (
    FAILED,
    PHASES,
    Blocker,
    ClaimPhases,
    Diagnosis,
    Observed,
    driver_summary,
)
from csi_hostpath.why.rules.kube_fields import Obj
from csi_hostpath.why.rules.node_gone import fenced, holder_gone
from csi_hostpath.why.rules.phases import attachments_of, claim_phases, holder
from csi_hostpath.why.rules.pod_blocker import pod_blocker

CAPACITY_WORDS = ("ResourceExhausted", "did not have enough free storage", "no room")


def desc(message: str) -> str:
    """A gRPC error as the sidecars print it, its description only."""
    return message.split("desc = ", 1)[-1].strip()


def diagnose(obs: Observed) -> Diagnosis:
    pod = obs.pod
    pairs = kf.claims_of(pod) if pod is not None else [("", obs.claim_asked)]
    if obs.claim_asked and pod is not None:
        pairs = [p for p in pairs if p[1] == obs.claim_asked] or pairs
    claims = tuple(claim_phases(obs, vol, claim) for vol, claim in pairs)
    blocker = fenced(obs, claims) or _storage(obs, claims) or pod_blocker(obs, claims)
    return Diagnosis(
        "pvc" if obs.claim_asked else "pod",
        obs.claim_asked or kf.name(pod),
        obs.namespace,
        kf.text(pod, "spec", "nodeName"),
        claims,
        blocker,
        {
            c.volume_handle: driver_summary(c.volume_handle, obs.ledger.get(c.volume_handle))
            for c in claims
            if c.volume_handle
        },
    )


def _storage(obs: Observed, claims: tuple[ClaimPhases, ...]) -> Blocker | None:
    """The least advanced claim's first phase that is not done, explained."""
    waiting: list[tuple[int, int, ClaimPhases]] = []
    for i, c in enumerate(claims):
        row = c.first_undone()
        if row is not None:
            waiting.append((PHASES.index(row.phase), i, c))
    if not waiting:
        return None
    _, _, c = min(waiting)
    row = c.first_undone()
    assert row is not None
    explain: dict[str, Callable[[Observed, ClaimPhases], Blocker]] = {
        "provision": _provision,
        "bind": _provision,
        "attach": _attach,
        "stage": _node_side,
        "publish": _node_side,
    }
    return explain[row.phase](obs, c)


def _provision(obs: Observed, c: ClaimPhases) -> Blocker:
    row = c.first_undone()
    assert row is not None
    pvc = obs.claims.get(c.claim)
    if pvc is None:
        return Blocker(
            "claim-missing",
            f"claim {c.claim} does not exist in namespace {obs.namespace}",
            f"create claim {c.claim}, or fix the name the pod gives",
            row.phase,
            c.claim,
        )
    scheduler = kf.text(kf.condition(obs.pod, "PodScheduled"), "message")
    asked = kf.text(pvc, "spec", "resources", "requests", "storage")
    if any(w in row.why for w in CAPACITY_WORDS) or "enough free storage" in scheduler:
        said = desc(row.why) if row.state == FAILED else f"the scheduler: {scheduler}"
        return Blocker(
            "no-capacity",
            f"no node has the capacity asked for: claim {c.claim} asks for {asked}; {said}",
            "ask for less, or make room: delete volumes or snapshots nobody needs, or grow the "
            "pool (the chart's pool.hostPath)",
            row.phase,
            c.claim,
        )
    if row.state == FAILED:
        code = "claim-lost" if row.phase == "bind" else "provision-failed"
        return Blocker(
            code,
            f"claim {c.claim} is not provisioned: {desc(row.why)}",
            "read the message: fix the claim or the StorageClass it names; the provisioner "
            "retries by itself",
            row.phase,
            c.claim,
        )
    if "first consumer" in row.why:
        if obs.pod is None:
            return Blocker(
                "waiting-for-first-consumer",
                f"claim {c.claim} waits for its first consumer: StorageClass {c.storage_class} "
                "binds WaitForFirstConsumer, and no pod uses it yet",
                "nothing is wrong: create the pod that uses it; the volume is made for the "
                "node the scheduler picks for that pod",
                row.phase,
                c.claim,
            )
        return _unscheduled(obs, c, row.phase)
    return Blocker(
        "provision-waiting",
        f"claim {c.claim} waits for its volume: {row.why}",
        f"check that the driver's provisioner runs ({c.driver or 'the StorageClass provisioner'})"
        " and read its log",
        row.phase,
        c.claim,
    )


def _unscheduled(obs: Observed, c: ClaimPhases, phase: str) -> Blocker:
    said = kf.text(kf.condition(obs.pod, "PodScheduled"), "message")
    if "ReadWriteOncePod" in said or "ReadWriteOncePod" in c.access_modes:
        others = [
            p
            for p in obs.pods
            if kf.uses_claim(p, c.claim)
            and not kf.is_finished(p)
            and kf.name(p) != kf.name(obs.pod)
        ]
        if others:
            o = others[0]
            where = kf.text(o, "spec", "nodeName") or "not yet placed"
            return Blocker(
                "rwop-conflict",
                f"claim {c.claim} is ReadWriteOncePod and pod {obs.namespace}/{kf.name(o)} uses "
                f"it (on node {where}): no second pod may use it at the same time",
                f"delete or stop pod {kf.name(o)} if this pod should have the volume, or give "
                "this pod a claim of its own",
                phase,
                c.claim,
            )
    return Blocker(
        "not-scheduled",
        f"pod {obs.namespace}/{kf.name(obs.pod)} is not scheduled: "
        f"{said or 'the scheduler has not placed it yet'}",
        "read the scheduler's reason: free the resources it names, or relax the pod's constraints",
        phase,
        c.claim,
    )


def _users_on(obs: Observed, node: str, handle: str) -> list[str]:
    """ns/name of the pods on node that use a volume of this handle (through any claim)."""
    claims = {
        (kf.text(pv, "spec", "claimRef", "namespace"), kf.text(pv, "spec", "claimRef", "name"))
        for pv in obs.volumes.values()
        if kf.text(pv, "spec", "csi", "volumeHandle") == handle
    }
    found = []
    for p in [*obs.pods, *([obs.pod] if obs.pod is not None else [])]:
        ns = kf.text(p, "metadata", "namespace") or obs.namespace
        on_node = kf.text(p, "spec", "nodeName") == node and not kf.is_finished(p)
        if on_node and any((ns, claim) in claims for _, claim in kf.claims_of(p)):
            found.append(f"{ns}/{kf.name(p)}")
    return sorted(set(found))


def _attach(obs: Observed, c: ClaimPhases) -> Blocker:
    row = c.first_undone()
    assert row is not None
    node = kf.text(obs.pod, "spec", "nodeName")
    if obs.pod is None:
        return Blocker(
            "no-consumer",
            f"claim {c.claim} is Bound to {c.persistent_volume} and no pod uses it: nothing "
            "asks for it on a node",
            "nothing to do until a pod uses it",
            row.phase,
            c.claim,
        )
    if not node:
        return _unscheduled(obs, c, row.phase)
    if c.driver and obs.csinodes and c.driver not in kf.drivers_on(obs.csinodes.get(node)):
        return Blocker(
            "driver-not-on-node",
            f"node {node} has no {c.driver} plugin registered (its CSINode lists "
            f"{', '.join(kf.drivers_on(obs.csinodes.get(node))) or 'none'})",
            "check the driver's node plugin pod on that node and its registrar's log",
            row.phase,
            c.claim,
        )
    view = obs.view(c.volume_handle)
    others = [
        h for h in (view or {}).get("holders") or [] if h.get("node") and h.get("node") != node
    ]
    attached_elsewhere = [
        kf.text(a, "spec", "nodeName")
        for a in attachments_of(obs, c.persistent_volume)
        if kf.text(a, "spec", "nodeName") != node
    ]
    holders = [str(h["node"]) for h in others] or attached_elsewhere
    if not holders:
        code = "attach-failed" if row.state == FAILED else "attach-waiting"
        return Blocker(
            code,
            f"volume {c.persistent_volume} is not attached to node {node}: {desc(row.why)}",
            "read the attacher's log (the csi-attacher container of the driver's controller)",
            row.phase,
            c.claim,
        )
    return _held_elsewhere(obs, c, node, holders[0], holder(view, holders[0]), row.state)


def _held_elsewhere(
    obs: Observed, c: ClaimPhases, node: str, other: str, held: Obj | None, state: str
) -> Blocker:
    ready, since = kf.node_ready(obs.nodes.get(other))
    silent = held is not None and held.get("silent") is True
    if ready in ("False", "Unknown") or silent:
        return holder_gone(obs, c, node, other, held, ready, since)
    users = _users_on(obs, other, c.volume_handle)
    by = f" for pod {', '.join(users)}" if users else ""
    mode = held.get("access_mode", "its access mode") if held else "ReadWriteOnce"
    if state == FAILED and held is not None:
        shared = sorted(
            kf.name(pv)
            for pv in obs.volumes.values()
            if kf.text(pv, "spec", "csi", "volumeHandle") == c.volume_handle
        )
        note = (
            f"; {len(shared)} PersistentVolumes name this one volume ({', '.join(shared)}), so "
            "Kubernetes can't see that they are one disk"
            if len(shared) > 1
            else ""
        )
        return Blocker(
            "multi-attach-ledger",
            f"the ledger refuses to attach {c.volume_handle} to node {node}: node {other} holds "
            f"it{by} (since {kf.clock(held.get('since'))}, generation {held.get('generation')}), "
            f"and {mode} allows one node at a time",
            f"stop {('pod ' + users[0]) if users else 'what uses it'} on {other}, or run this pod "
            f"on {other}; {node} gets the volume once {other} lets go{note}",
            "attach",
            c.claim,
        )
    return Blocker(
        "multi-attach",
        f"volume {c.persistent_volume} is attached to node {other}{by}; "
        f"{', '.join(c.access_modes) or 'its access mode'} allows one node at a time, so "
        f"Kubernetes won't attach it to {node} meanwhile",
        f"stop {('pod ' + users[0]) if users else 'what uses it'} on {other}, or run this pod on "
        f"{other}; the attach follows once {other} has let go",
        "attach",
        c.claim,
    )


def _node_side(obs: Observed, c: ClaimPhases) -> Blocker:
    row = c.first_undone()
    assert row is not None
    node = kf.text(obs.pod, "spec", "nodeName")
    ready, since = kf.node_ready(obs.nodes.get(node))
    if ready in ("False", "Unknown"):
        return Blocker(
            "pod-node-not-ready",
            f"the pod's node {node} is NotReady (since {kf.clock(since)}): its kubelet can't "
            f"{row.phase} the volume",
            f"bring {node}'s kubelet back; if {node} is gone for good, see `why` of the pod "
            "that replaces this one",
            row.phase,
            c.claim,
        )
    verb = "NodeStageVolume" if row.phase == "stage" else "NodePublishVolume"
    if row.state == FAILED:
        return Blocker(
            f"{row.phase}-failed",
            f"{verb} of {c.persistent_volume} on {node} failed: {desc(row.why)}",
            f"read the driver's log on {node} (the csi-hostpath container of its node plugin)",
            row.phase,
            c.claim,
        )
    return Blocker(
        f"{row.phase}-waiting",
        f"{c.persistent_volume} waits for {verb} on {node}: {row.why}",
        "the kubelet retries by itself; if it lasts, read the pod's events and the driver's "
        f"log on {node}",
        row.phase,
        c.claim,
    )
