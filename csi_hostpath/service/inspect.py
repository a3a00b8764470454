"""Where is a volume in its lifecycle, and what is it waiting for?

"Bound" proves one phase, not five. This reads the controller's store, the pool (backing
file, lease, node heartbeats with what each node reports staged) and answers one row per phase:
its state and, where it is stuck, why and what is the next safe action.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.core.nodeloss import DEFAULT_LOST_AFTER
from csi_hostpath.core.request_text import shown
from csi_hostpath.service.lost_volumes import loss_of
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import Heartbeat, PoolLayout

OK, PENDING, STUCK, ABNORMAL, ABSENT = "ok", "pending", "stuck", "abnormal", "absent"

# Long enough for any phase's text; only a name stored before the size rule would reach it.
LONG = 4096


@dataclass(frozen=True, slots=True)
class Phase:
    phase: str
    state: str
    detail: str
    reason: str = ""
    next_action: str = ""


def human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def inspect_volume(
    store: Store,
    layout: PoolLayout,
    volume_id: str,
    node_grace: float,
    now: float | None = None,
    lost_after: float = DEFAULT_LOST_AFTER,
    local_name: str = "",
) -> list[Phase]:
    """local_name: the name `csi-hostpath volume` gave the volume, when it made it: the next
    steps are then that command's, not Kubernetes'."""
    now = time.time() if now is None else now
    volume = store.get_volume(volume_id) if is_volume_id(volume_id) else None
    backing = layout.volume_file(volume_id) if is_volume_id(volume_id) else None
    if volume is None:
        orphan = backing is not None and backing.exists()
        return [
            Phase(
                "provisioned",
                ABSENT,
                f"no volume {volume_id!r} in the ledger",
                "a backing file exists without a record (a crash during CreateVolume)"
                if orphan
                else "",
                "the controller removes such files when it starts" if orphan else "",
            )
        ]
    assert backing is not None
    phases: list[Phase] = []
    if backing.exists():
        st = backing.stat()
        phases.append(
            Phase(
                "provisioned",
                OK,
                f"{backing} size {volume.capacity_bytes} B, allocated {st.st_blocks * 512} B, "
                f"{volume.fs_type or 'block'}",
            )
        )
    else:
        phases.append(
            Phase(
                "provisioned",
                ABNORMAL,
                f"{backing} is missing",
                "the backing file was removed outside the driver: the data is gone",
                "restore from a snapshot, or delete the volume",
            )
        )

    loss = loss_of(volume, store, layout, lost_after)
    if loss is not None:
        phases.append(
            Phase(
                "node",
                ABNORMAL,
                f"lives on node {loss.node_id!r}, which is lost",
                f"{loss.why}; the volume's data was on that node only",
                "delete the volume (DeleteVolume succeeds while the lost node holds it), then "
                f"make its claim provisionable again: csi-hostpath node cleanup {loss.node_id}",
            )
        )
    beats = {b.node_id: b for b in layout.heartbeats()}
    holders = store.publications(volume_id=volume_id)
    phases.append(_attached(volume_id, holders, beats, node_grace, now, local_name))

    staged_on = {n: b.volumes[volume_id] for n, b in beats.items() if volume_id in b.volumes}
    holder_ids = {p.node_id: p for p in holders}
    phases.append(_staged(volume_id, holder_ids, staged_on, beats, node_grace, now, local_name))
    phases.append(_published(staged_on, local_name))

    lost = [(n, v["abnormal"]) for n, v in sorted(staged_on.items()) if v.get("abnormal")]
    if lost:
        n, why = lost[0]
        phases.append(
            Phase(
                "health",
                ABNORMAL,
                f"on {n}, {why}",
                "something outside the driver (losetup -d, a script) released the device",
                "restart the pods using it (NodeUnstage, NodeStage attach it again), or the "
                "node plugin, which re-attaches staged volumes when it starts",
            )
        )
        return phases
    abnormal = not backing.exists() or backing.stat().st_size != volume.capacity_bytes
    phases.append(
        Phase(
            "health",
            ABNORMAL if abnormal else OK,
            "backing file present, size as recorded"
            if not abnormal
            else "backing file missing or resized outside the driver",
        )
    )
    return phases


def _attached(
    volume_id: str,
    holders: list[Any],
    beats: dict[str, Heartbeat],
    node_grace: float,
    now: float,
    local_name: str = "",
) -> Phase:
    if not holders:
        return Phase(
            "attached",
            PENDING,
            "no node holds it",
            "not published: nothing has asked for it on a node yet",
            f"mount it: csi-hostpath volume mount {local_name} ./{local_name}"
            if local_name
            else "the CO publishes it when a pod using it is scheduled (VolumeAttachment)",
        )
    parts, silent = [], []
    for p in holders:
        beat = beats.get(p.node_id)
        age = beat.age(now) if beat else None
        heard = "never heard from" if age is None else f"heartbeat {human_age(age)} ago"
        parts.append(
            f"{p.node_id} ({p.access_mode.name}, {'ro' if p.readonly else 'rw'}, generation "
            f"{p.generation}, since {_clock(p.published_at)}, {heard})"
        )
        if age is None or age >= node_grace:
            silent.append((p, age))
    if silent:
        p, age = silent[0]
        quiet = "never heard from" if age is None else f"silent for {human_age(age)}"
        return Phase(
            "attached",
            STUCK,
            "; ".join(parts),
            f"held by {p.node_id} since {_clock(p.published_at)}; {p.node_id} {quiet}",
            f"waiting is safe. In Kubernetes, once the node is surely gone: kubectl taint node "
            f"{p.node_id} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (the detach "
            "that follows revokes the hold); for a hold no VolumeAttachment backs, or outside "
            f"Kubernetes, force-detach possible with --reason: csi-hostpath ledger "
            f"force-detach {volume_id} --node {p.node_id} --reason '...'",
        )
    return Phase("attached", OK, "; ".join(parts))


def unclaimed_phase(node_id: str, entry: dict[str, Any]) -> Phase:
    """A mount a node's plugin found without a record and left in place (service/node/adopt.py),
    as inspect and doctor both say it."""
    return Phase(
        "staged",
        STUCK,
        f"in use on {node_id}: {entry.get('device')} mounted at "
        f"{', '.join(entry.get('mounts', [])) or 'no path it knows'}",
        f"{node_id}'s plugin has no record of it and left it in place ({entry.get('unclaimed')})",
        "the CO's NodeUnpublish/NodeUnstage take it down; or unmount and detach it by hand "
        "once no pod uses it",
    )


def _staged(
    volume_id: str,
    holders: dict[str, Any],
    staged_on: dict[str, dict[str, Any]],
    beats: dict[str, Heartbeat],
    node_grace: float,
    now: float,
    local_name: str = "",
) -> Phase:
    unclaimed = [n for n, v in sorted(staged_on.items()) if v.get("unclaimed")]
    if unclaimed:
        return unclaimed_phase(unclaimed[0], staged_on[unclaimed[0]])
    revoked = [n for n in staged_on if n not in holders]
    if revoked:
        n = revoked[0]
        return Phase(
            "staged",
            STUCK,
            f"staged on {n} at {staged_on[n].get('staging')} ({staged_on[n].get('device')})",
            f"{n} no longer holds it in the ledger (unpublished or force-detached)",
            f"{n} fences itself at its next lease check; if {n} is gone, nothing to do",
        )
    if staged_on:
        return Phase(
            "staged",
            OK,
            "; ".join(
                f"{n}: {v.get('device')} at {v.get('staging')} (generation {v.get('generation')})"
                for n, v in sorted(staged_on.items())
            ),
        )
    if not holders:
        return Phase("staged", PENDING, "not staged anywhere", "it is not attached yet")
    waiting = sorted(holders)
    silent = [n for n in waiting if n not in beats or beats[n].age(now) >= node_grace]
    if silent:
        return Phase(
            "staged",
            STUCK,
            f"not reported staged by {', '.join(waiting)}",
            f"{silent[0]} is silent, so what it has mounted is unknown",
            "see the attached row",
        )
    if local_name:
        return Phase(
            "staged",
            PENDING,
            f"attached to {', '.join(waiting)}, not staged",
            f"waiting for NodeStageVolume on {waiting[0]}: a `csi-hostpath volume mount` that "
            "did not finish",
            f"run it again: csi-hostpath volume mount {local_name} PATH",
        )
    return Phase(
        "staged",
        PENDING,
        f"attached to {', '.join(waiting)}, not staged",
        f"waiting for NodeStageVolume on {waiting[0]} (the kubelet calls it once a pod using "
        "the volume lands there)",
        "check the pod's events and the kubelet log on that node if this lasts",
    )


def _published(staged_on: dict[str, dict[str, Any]], local_name: str = "") -> Phase:
    targets = [(n, t) for n, v in sorted(staged_on.items()) for t in v.get("targets", [])]
    busy = [(n, p, b) for n, v in sorted(staged_on.items()) for p, b in v.get("busy", {}).items()]
    if busy:
        n, path, b = busy[0]
        why = b.get("held_by") or "busy, and no process was found (a mount beneath it?)"
        beneath = str(why).endswith("mounted beneath it")
        return Phase(
            "published",
            STUCK,
            "; ".join(f"{n}: {t}" for n, t in targets) or "no target path",
            f"{path} on {n} can't be released: {why}",
            "unmount what is mounted beneath it, then retry the unmount"
            if beneath
            else f"stop those processes, then csi-hostpath volume unmount {path} again"
            if local_name
            else "stop those processes (or the pod that runs them); the kubelet retries the "
            "unmount",
        )
    if targets:
        return Phase("published", OK, "; ".join(f"{n}: {t}" for n, t in targets))
    if staged_on:
        node = sorted(staged_on)[0]
        return Phase(
            "published",
            PENDING,
            f"staged on {node}, no target path",
            "waiting for NodePublishVolume (a pod starting on that node)",
            f"mount it: csi-hostpath volume mount {local_name} PATH"
            if local_name
            else "if the pod sits in ContainerCreating, read its events: the cause may be another "
            "of its volumes, not this one",
        )
    return Phase("published", PENDING, "not published", "it is not staged yet")


def as_json(phases: list[Phase]) -> list[dict[str, str]]:
    return [asdict(p) for p in phases]


def render_phases(phases: list[Phase]) -> str:
    """The phases as an aligned table, each reason and next step under it. Node IDs, paths and
    names in them came from requests: each is kept to its line (escaped), never cut."""
    phases = [
        replace(
            p,
            detail=shown(p.detail, LONG),
            reason=shown(p.reason, LONG),
            next_action=shown(p.next_action, LONG),
        )
        for p in phases
    ]
    rows = [["PHASE", "STATE", "DETAIL"]] + [[p.phase, p.state, p.detail] for p in phases]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = []
    for r in rows:
        lines.append(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}".rstrip())
    for p in phases:
        if p.reason:
            lines.append(f"  {p.phase}: {p.reason}")
        if p.next_action:
            lines.append(f"  {p.phase}: next: {p.next_action}")
    return "\n".join(lines)
