"""The five phases of one claim for one pod (provision, bind, attach, stage, publish), each done,
waiting or failed, with the time spent, joined from the Kubernetes objects and the driver's
ledger view.

Where each phase's clock comes from: provision runs from the claim's creation to the
PersistentVolume's; bind to the volume's last phase change (Bound); attach from the
VolumeAttachment's creation to the ledger's hold (`since`); stage to the node's `staged_at`;
publish to the first start of the pod's containers. A moment no object records leaves the time
unknown rather than guessed.
"""

from __future__ import annotations

from typing import Any

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import (
    DONE,
    FAILED,
    PHASES,
    WAITING,
    ClaimPhases,
    Observed,
    PhaseRow,
)
from csi_hostpath.why.rules.kube_fields import Obj


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, end - start)


def attachments_of(obs: Observed, pv_name: str) -> list[Obj]:
    source = ("spec", "source", "persistentVolumeName")
    return [a for a in obs.attachments if kf.text(a, *source) == pv_name]


def holder(view: Obj | None, node: str) -> Obj | None:
    for h in (view or {}).get("holders") or []:
        if h.get("node") == node:
            return dict(h)
    return None


def staging(view: Obj | None, node: str) -> Obj | None:
    for s in (view or {}).get("stagings") or []:
        if s.get("node") == node:
            return dict(s)
    return None


def _first_hold(view: Obj | None, node: str, since: float | None, held: Obj | None) -> Any:
    """When the ledger first gave node this attachment: its first publish after the
    VolumeAttachment was made (a later re-grant keeps the attachment), else the hold's own
    time."""
    for a in (view or {}).get("audit") or []:
        after = since is None or float(a.get("at", 0)) >= since
        if a.get("action") == "publish" and a.get("node") == node and after:
            return a.get("at")
    return held.get("since") if held else None


def attach_required(obs: Observed, driver: str) -> bool:
    value = kf.field(obs.csidrivers.get(driver), "spec", "attachRequired")
    return value is not False  # Kubernetes' default: attach


def provision(obs: Observed, pvc: Obj, sc: Obj | None, pv: Obj | None) -> PhaseRow:
    start = kf.created(pvc)
    if pv is not None:
        end = kf.created(pv)
        static = end is not None and start is not None and end < start
        how = "an existing PersistentVolume" if static else "provisioned"
        size = kf.text(pv, "spec", "capacity", "storage")
        return PhaseRow(
            "provision",
            DONE,
            0.0 if static else _span(start, end),
            f"{kf.name(pv)} ({size}, {how})",
        )
    events = obs.events_of(pvc)
    failed = kf.newest(events, "ProvisioningFailed")
    waited = _span(start, obs.now)
    binding = kf.text(sc, "volumeBindingMode")
    selected = kf.text(pvc, "metadata", "annotations", kf.SELECTED_NODE)
    if binding == "WaitForFirstConsumer" and not selected:
        return PhaseRow(
            "provision",
            WAITING,
            waited,
            f"StorageClass {kf.name(sc)} binds WaitForFirstConsumer",
            "it waits for its first consumer: a pod using the claim, placed on a node",
        )
    if failed is not None:
        return PhaseRow(
            "provision",
            FAILED,
            waited,
            "the provisioner's last try failed (it tries again)",
            str(failed.get("message", "")),
        )
    told = kf.newest(events, "ExternalProvisioning")
    where = f" for node {selected}" if selected else ""
    return PhaseRow(
        "provision",
        WAITING,
        waited,
        f"no PersistentVolume yet{where}",
        str(told.get("message")) if told else "waiting for the provisioner to create the volume",
    )


def bind(obs: Observed, pvc: Obj, pv: Obj | None) -> PhaseRow:
    phase = kf.text(pvc, "status", "phase")
    if phase == "Bound" and pv is not None:
        bound = kf.parse_time(kf.field(pv, "status", "lastPhaseTransitionTime"))
        # A volume made before its claim (static) waits for the claim, not the binder.
        start = max((t for t in (kf.created(pv), kf.created(pvc)) if t is not None), default=None)
        return PhaseRow("bind", DONE, _span(start, bound), f"claim Bound to {kf.name(pv)}")
    if phase == "Lost":
        return PhaseRow(
            "bind",
            FAILED,
            None,
            "claim Lost",
            f"its PersistentVolume {kf.text(pvc, 'spec', 'volumeName')} is gone",
        )
    if pv is not None:
        return PhaseRow(
            "bind",
            WAITING,
            _span(kf.created(pv), obs.now),
            f"{kf.name(pv)} exists, the claim is {phase or 'not Bound'}",
            "waiting for Kubernetes' volume binder to bind them",
        )
    return PhaseRow("bind", WAITING, None, "nothing to bind yet", "it waits for the provision")


def _no_node(pod: Obj | None) -> PhaseRow:
    if pod is None:
        return PhaseRow("attach", WAITING, None, "no pod uses the claim", "nothing asks for it")
    scheduled = kf.condition(pod, "PodScheduled")
    said = kf.text(scheduled, "message")
    return PhaseRow(
        "attach",
        WAITING,
        None,
        "the pod is not scheduled",
        f"the scheduler: {said}" if said else "the pod waits for the scheduler",
    )


def attach(obs: Observed, pv: Obj | None, driver: str) -> PhaseRow:
    pod = obs.pod
    node = kf.text(pod, "spec", "nodeName")
    if pod is None or not node:
        return _no_node(pod)
    if pv is None:
        return PhaseRow("attach", WAITING, None, "no PersistentVolume yet", "it waits for the bind")
    if not attach_required(obs, driver):
        return PhaseRow("attach", DONE, 0.0, f"{driver} needs no attach (attachRequired: false)")
    view = obs.view(kf.text(pv, "spec", "csi", "volumeHandle"))
    held = holder(view, node)
    mine = [a for a in attachments_of(obs, kf.name(pv)) if kf.text(a, "spec", "nodeName") == node]
    if mine:
        va = mine[0]
        started = kf.created(va)
        if kf.field(va, "status", "attached") is True:
            ledger = (
                f"; ledger: {node} holds it (generation {held.get('generation')})" if held else ""
            )
            return PhaseRow(
                "attach",
                DONE,
                _span(started, _first_hold(view, node, started, held)),
                f"VolumeAttachment {kf.name(va)} on {node}{ledger}",
            )
        error = kf.text(va, "status", "attachError", "message")
        if error:
            return PhaseRow(
                "attach",
                FAILED,
                _span(started, obs.now),
                f"VolumeAttachment {kf.name(va)} on {node} not attached",
                error,
            )
        return PhaseRow(
            "attach",
            WAITING,
            _span(started, obs.now),
            f"VolumeAttachment {kf.name(va)} on {node} not attached yet",
            "waiting for the attacher (ControllerPublishVolume)",
        )
    events = obs.events_of(pod)
    refused = kf.newest(events, "FailedAttachVolume", "Multi-Attach error")
    if refused is not None:
        return PhaseRow(
            "attach",
            WAITING,
            None,
            f"no VolumeAttachment on {node}",
            str(refused.get("message", "")),
        )
    failed = kf.newest(events, "FailedAttachVolume")
    if failed is not None:
        return PhaseRow(
            "attach", FAILED, None, f"no VolumeAttachment on {node}", str(failed.get("message"))
        )
    return PhaseRow(
        "attach",
        WAITING,
        None,
        f"no VolumeAttachment on {node} yet",
        "waiting for Kubernetes' attach-detach controller",
    )


# The kubelet's words for a failed stage (MountDevice) and a failed publish (SetUp).
KUBELET_STEP = {"stage": "MountVolume.MountDevice", "publish": "MountVolume.SetUp"}


def _kubelet_said(
    obs: Observed,
    pv: Obj,
    phase: str,
    where: str,
    since: float | None,
    no_view: bool,
    pod_volume: str,
) -> PhaseRow | None:
    """What the pod's side tells of a stage or publish the driver does not report: the
    kubelet's failure event, or (without the driver's view) a volume seen mounted."""
    step = f'{KUBELET_STEP[phase]} failed for volume "{kf.name(pv)}"'
    failed = kf.newest(obs.events_of(obs.pod), "FailedMount", step)
    if failed is not None:
        message = str(failed.get("message", ""))
        return PhaseRow(phase, FAILED, _span(since, obs.now), where, message)
    if no_view and _seen_mounted(obs, pod_volume):
        node = kf.text(obs.pod, "spec", "nodeName")
        return PhaseRow(phase, DONE, None, f"on {node} (seen from the pod; no driver view)")
    return None


def _seen_mounted(obs: Observed, pod_volume: str) -> bool:
    """Without the driver's view: the pod's containers started, or the kubelet's last word on
    the pod's unmounted volumes leaves this one out."""
    if kf.container_started(obs.pod) is not None:
        return True
    unmounted = kf.unmounted_volumes(obs.events_of(obs.pod))
    return unmounted is not None and pod_volume not in unmounted


def stage(obs: Observed, pv: Obj | None, attached: PhaseRow, pod_volume: str) -> PhaseRow:
    node = kf.text(obs.pod, "spec", "nodeName")
    if attached.state != DONE or pv is None:
        return PhaseRow("stage", WAITING, None, "not attached", "it waits for the attach")
    handle = kf.text(pv, "spec", "csi", "volumeHandle")
    view = obs.view(handle)
    held = holder(view, node)
    staged = staging(view, node)
    if staged is not None:
        return PhaseRow(
            "stage",
            DONE,
            _span(held.get("since") if held else None, staged.get("staged_at")),
            f"{node}: {staged.get('device')} at {staged.get('staging')} "
            f"(generation {staged.get('generation')})",
        )
    started = held.get("since") if held else None
    where = f"not staged on {node}"
    known = _kubelet_said(obs, pv, "stage", where, started, view is None, pod_volume)
    if known is not None:
        return known
    why = (
        f"waiting for NodeStageVolume on {node} (the kubelet calls it)"
        if view is not None
        else f"the driver's view is unavailable ({obs.ledger.get(handle, {}).get('error', '')})"
    )
    return PhaseRow("stage", WAITING, _span(started, obs.now), where, why)


def publish(obs: Observed, pv: Obj | None, staged: PhaseRow, pod_volume: str) -> PhaseRow:
    pod = obs.pod
    node = kf.text(pod, "spec", "nodeName")
    if staged.state != DONE or pv is None or pod is None:
        return PhaseRow("publish", WAITING, None, "not staged", "it waits for the stage")
    view = obs.view(kf.text(pv, "spec", "csi", "volumeHandle"))
    entry = staging(view, node)
    marker = f"/pods/{kf.uid(pod)}/volumes/"
    mine = [t for t in (entry or {}).get("targets") or [] if marker in str(t)]
    since = entry.get("staged_at") if entry else None
    if mine:
        return PhaseRow(
            "publish",
            DONE,
            _span(since, kf.container_started(pod)),
            f"{node}: {mine[0]}",
        )
    where = f"no target of this pod on {node}"
    known = _kubelet_said(obs, pv, "publish", where, since, view is None, pod_volume)
    if known is not None:
        return known
    return PhaseRow(
        "publish",
        WAITING,
        _span(since, obs.now),
        where,
        f"waiting for NodePublishVolume of this pod on {node}",
    )


def claim_phases(obs: Observed, pod_volume: str, claim_name: str) -> ClaimPhases:
    pvc = obs.claims.get(claim_name)
    if pvc is None:
        absent = tuple(
            PhaseRow(p, WAITING, None, "the claim does not exist", "nothing to do until it does")
            for p in PHASES
        )
        return ClaimPhases(claim_name, pod_volume, "", "", "", "", (), absent)
    sc_name = kf.text(pvc, "spec", "storageClassName")
    sc = obs.storage_classes.get(sc_name)
    pv = obs.volumes.get(kf.text(pvc, "spec", "volumeName"))
    driver = kf.text(pv, "spec", "csi", "driver") or kf.text(sc, "provisioner")
    rows = [provision(obs, pvc, sc, pv), bind(obs, pvc, pv)]
    rows.append(
        attach(obs, pv, driver)
        if rows[-1].state == DONE
        else PhaseRow("attach", WAITING, None, "the claim is not Bound", "it waits for the bind")
    )
    rows.append(stage(obs, pv, rows[-1], pod_volume))
    rows.append(publish(obs, pv, rows[-1], pod_volume))
    if rows[1].state != DONE and obs.pod is not None and not kf.text(obs.pod, "spec", "nodeName"):
        rows[2] = _no_node(obs.pod)
    return ClaimPhases(
        claim_name,
        pod_volume,
        sc_name,
        kf.name(pv),
        kf.text(pv, "spec", "csi", "volumeHandle"),
        driver,
        tuple(str(m) for m in kf.field(pvc, "spec", "accessModes") or []),
        tuple(rows),
    )
