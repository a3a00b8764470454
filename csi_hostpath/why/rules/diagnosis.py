"""`kubectl csi-hostpath why`: what it reads (Observed), what it answers (Diagnosis: the five
phases of each claim, then the one blocking reason), and that answer as the versioned JSON
document of `-o json` (docs/operations.md describes it field by field).

Pure data: the client fills Observed from the API server and the driver, why/rules/phases.py
and why/rules/blocker.py turn it into a Diagnosis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from csi_hostpath.why.rules.kube_fields import Obj

SCHEMA = "csi-hostpath.why/v1"
PHASES = ("provision", "bind", "attach", "stage", "publish")
DONE, WAITING, FAILED = "done", "waiting", "failed"
# The audit actions that take a hold away from a node, and the node's answer to one.
REVOCATIONS = ("revoke", "force-detach", "delete-lost")
FENCED = "fenced"


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything read for one question, as the API server and the driver gave it."""

    namespace: str
    # The pod asked about, or the pod that uses the claim asked about; None: no pod uses it.
    pod: Obj | None
    # The claims of that pod (or the one claim asked about), by name, in the namespace.
    claims: Mapping[str, Obj]
    storage_classes: Mapping[str, Obj]
    # Every PersistentVolume read: the claims' own, and any other naming the same volume handle.
    volumes: Mapping[str, Obj]
    # The VolumeAttachments of those PersistentVolumes, on every node.
    attachments: Sequence[Obj]
    nodes: Mapping[str, Obj]
    csinodes: Mapping[str, Obj]
    csidrivers: Mapping[str, Obj]
    # Events by the UID of the object they are about.
    events: Mapping[str, Sequence[Obj]]
    # Other pods that matter: those using the same claims, or the same volumes elsewhere.
    pods: Sequence[Obj]
    # The driver's ledger view (service/ledger_view.py) by volume handle, or {"error": why not}.
    ledger: Mapping[str, Obj]
    # When it was read (Unix seconds).
    now: float
    # The claim asked about (`why pvc/NAME`), "" when a pod was asked about.
    claim_asked: str = ""
    # Where the driver's controller runs, for the commands a next step names: the namespace
    # and the pod to `kubectl exec` into ("" when unknown).
    driver_namespace: str = ""
    driver_pod: str = ""

    def events_of(self, obj: Obj | None) -> Sequence[Obj]:
        meta = obj.get("metadata") if obj else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        return self.events.get(str(uid), ()) if uid else ()

    def view(self, handle: str) -> Obj | None:
        """The driver's view of a volume it knows; None when unavailable or unknown to it."""
        v = self.ledger.get(handle)
        return v if v is not None and v.get("known") is True else None


@dataclass(frozen=True, slots=True)
class PhaseRow:
    phase: str
    state: str  # DONE, WAITING or FAILED
    # Time spent in the phase: start to end when done, start to now otherwise; None when no
    # object recorded the moment it started or ended.
    seconds: float | None
    detail: str  # what was seen
    why: str = ""  # why it is not done, in a sentence ("" when done)


@dataclass(frozen=True, slots=True)
class ClaimPhases:
    claim: str
    pod_volume: str  # the pod's name for the volume ("" for a claim no pod uses)
    storage_class: str
    persistent_volume: str
    volume_handle: str
    driver: str
    access_modes: tuple[str, ...]
    phases: tuple[PhaseRow, ...]

    def first_undone(self) -> PhaseRow | None:
        return next((p for p in self.phases if p.state != DONE), None)


@dataclass(frozen=True, slots=True)
class Blocker:
    """The one reason, and what to do. code names the case, stably (docs/operations.md)."""

    code: str
    reason: str
    next_step: str
    phase: str = ""  # the phase it blocks, "" when it is not storage's
    claim: str = ""
    # Where the next step is a bet: what is bet, and who must own the decision.
    risk: str = ""
    owner: str = ""


@dataclass(frozen=True, slots=True)
class Diagnosis:
    kind: str  # "pod" or "pvc"
    name: str
    namespace: str
    node: str
    claims: tuple[ClaimPhases, ...]
    blocker: Blocker
    driver: Mapping[str, Obj] = field(default_factory=dict)


def driver_summary(handle: str, view: Obj | None) -> dict[str, Any]:
    """What the document says of the driver's view of one volume."""
    if view is None or "error" in view:
        error = str((view or {}).get("error", "not asked"))
        return {"volume_handle": handle, "available": False, "error": error}
    audit = list(view.get("audit") or [])
    return {
        "volume_handle": handle,
        "available": True,
        "error": "",
        "known": bool(view.get("known")),
        "generation": view.get("generation"),
        "holders": list(view.get("holders") or []),
        "stagings": list(view.get("stagings") or []),
        "fences": [a for a in audit if a.get("action") in (*REVOCATIONS, FENCED)],
    }


def as_json(d: Diagnosis, now: float) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "observed_at": now,
        "target": {"kind": d.kind, "namespace": d.namespace, "name": d.name, "node": d.node},
        "claims": [
            {
                "claim": c.claim,
                "pod_volume": c.pod_volume,
                "storage_class": c.storage_class,
                "persistent_volume": c.persistent_volume,
                "volume_handle": c.volume_handle,
                "driver": c.driver,
                "access_modes": list(c.access_modes),
                "phases": [
                    {
                        "phase": p.phase,
                        "state": p.state,
                        "seconds": p.seconds,
                        "detail": p.detail,
                        "why": p.why,
                    }
                    for p in c.phases
                ],
            }
            for c in d.claims
        ],
        "blocking": {
            "code": d.blocker.code,
            "phase": d.blocker.phase,
            "claim": d.blocker.claim,
            "reason": d.blocker.reason,
            "next_step": d.blocker.next_step,
            "risk": d.blocker.risk,
            "owner": d.blocker.owner,
        },
        "driver": [dict(v) for _, v in sorted(d.driver.items())],
    }
