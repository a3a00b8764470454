"""The fault matrix: each component of the cluster killed with SIGKILL in each phase of a volume's
life. A cell is a (component, phase) whose kill lands on the phase's path; every other pair is
named here with the reason it can't test that phase. Pure data and selection, no I/O: `--list`
prints it without touching a cluster."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    name: str
    # static: a static pod of the control-plane node (the kubelet restarts it); unit: a systemd
    # unit with Restart=always in every kind node (tools/kind/node/files/etc/systemd/system/);
    # container: a container of the release's pods (the kubelet restarts it).
    kind: str
    # Where it is killed: the control-plane node, the volume's node (where the cell's pod runs),
    # or the node that runs the release's controller pod.
    where: str
    # The static pod's container, the unit's process, or the release pod's container.
    process: str
    # For a container: the release pod it is in (controller or node).
    pod: str = ""


COMPONENTS: tuple[Component, ...] = (
    Component("kube-apiserver", "static", "control-plane", "kube-apiserver"),
    Component("etcd", "static", "control-plane", "etcd"),
    Component("kube-controller-manager", "static", "control-plane", "kube-controller-manager"),
    Component("kube-scheduler", "static", "control-plane", "kube-scheduler"),
    Component("kubelet", "unit", "volume-node", "kubelet"),
    Component("containerd", "unit", "volume-node", "containerd"),
    Component("controller", "container", "controller-node", "csi-hostpath", "controller"),
    Component("node-plugin", "container", "volume-node", "csi-hostpath", "node"),
    Component("csi-provisioner", "container", "controller-node", "csi-provisioner", "controller"),
    Component("csi-attacher", "container", "controller-node", "csi-attacher", "controller"),
    Component("csi-resizer", "container", "controller-node", "csi-resizer", "controller"),
    Component("csi-snapshotter", "container", "controller-node", "csi-snapshotter", "controller"),
    Component("node-driver-registrar", "container", "volume-node", "node-driver-registrar", "node"),
)


@dataclass(frozen=True)
class Phase:
    name: str
    # What the cell does to start the phase, and what must hold before it.
    action: str
    # What "done" means: the operation completed.
    done: str
    # The default moment of the kill (a name of TRIGGERS).
    trigger: str


PHASES: tuple[Phase, ...] = (
    Phase("create", "apply a claim (Immediate binding)", "claim Bound, PV and pool file there",
          "at-action"),
    Phase("attach", "a reader pod on node A (the claim written on B, detached)",
          "pod Ready on A", "va-created"),
    Phase("stage", "the same, killed later", "pod Ready on A", "va-attached"),
    Phase("publish", "the same, killed later", "pod Ready on A", "staged-on-a"),
    Phase("expand", "patch an xfs claim under its running pod from 320Mi to 800Mi",
          "claim capacity 800Mi and the pod's df grown", "at-action"),
    Phase("snapshot", "a VolumeSnapshot of the claim under its running pod",
          "snapshot readyToUse", "content-created"),
    Phase("unpublish", "delete the pod on A", "pod gone, its target mount gone from A",
          "at-action"),
    Phase("unstage", "delete the pod on A, killed later", "staging mount gone from A",
          "target-gone"),
    Phase("detach", "delete the pod on A, killed later",
          "VolumeAttachment gone, no ledger hold", "unstaged"),
    Phase("delete", "delete the (detached) claim", "PV gone, pool file gone", "at-action"),
)  # fmt: skip

# When the kill lands, relative to the action: each a condition polled until it holds.
TRIGGERS: dict[str, str] = {
    "at-action": "right after the action",
    "va-created": "when the volume's VolumeAttachment to A exists",
    "va-attached": "when that VolumeAttachment is attached",
    "staged-on-a": "when A has the volume's staging mount",
    "node-resize-pending": "when the claim waits for the node's part of the expansion",
    "content-created": "when the VolumeSnapshotContent exists",
    "target-gone": "when the pod's target mount is gone from A, its staging mount still there",
    "unstaged": "when the staging mount is gone from A, the VolumeAttachment still there",
}

# The cells: for each component, the phases its kill lands on, each with why it is on the path
# and, where it is not the phase's own, the trigger that makes the kill land there.
ON_PATH: dict[str, dict[str, tuple[str, str]]] = {
    "kube-apiserver": {p.name: ("every step reads or writes an API object", "") for p in PHASES},
    "etcd": {p.name: ("the API server's store, under every step", "") for p in PHASES},
    "kube-controller-manager": {
        "create": ("the PV controller binds the claim", ""),
        "attach": ("the attach-detach controller makes the VolumeAttachment", "at-action"),
        "stage": ("the attach-detach controller lists the volume as attached in the node's "
                  "status, which the kubelet waits for before NodeStage", ""),
        "detach": ("the attach-detach controller deletes the VolumeAttachment", ""),
        "delete": ("the PV controller releases the PV for deletion", ""),
    },
    "kube-scheduler": {
        "create": ("with WaitForFirstConsumer the scheduler selects the node the volume is "
                   "created for", "at-action"),
        "attach": ("the pod's binding to A comes before its attach", "at-action"),
    },
    "kubelet": {
        "stage": ("NodeStageVolume is the kubelet's call", ""),
        "publish": ("NodePublishVolume is the kubelet's call", ""),
        "expand": ("NodeExpandVolume is the kubelet's call", "node-resize-pending"),
        "unpublish": ("NodeUnpublishVolume is the kubelet's call", ""),
        "unstage": ("NodeUnstageVolume is the kubelet's call", ""),
        "detach": ("the kubelet drops the volume from the node's volumesInUse, which the "
                   "attach-detach controller waits for", ""),
    },
    "containerd": {
        "publish": ("the pod's containers start after NodePublishVolume", ""),
        "unpublish": ("the pod's containers are stopped before NodeUnpublishVolume", ""),
    },
    "controller": {
        "create": ("CreateVolume", ""),
        "attach": ("ControllerPublishVolume", ""),
        "stage": ("NodeStage reads the lease the controller writes, and a starting controller "
                  "rewrites every lease that disagrees with its ledger", ""),
        "expand": ("ControllerExpandVolume", ""),
        "snapshot": ("CreateSnapshot", ""),
        "detach": ("ControllerUnpublishVolume", ""),
        "delete": ("DeleteVolume", ""),
    },
    "node-plugin": {
        "attach": ("ControllerPublishVolume reads A's heartbeat", ""),
        "stage": ("NodeStageVolume", ""),
        "publish": ("NodePublishVolume", ""),
        "expand": ("NodeExpandVolume", "node-resize-pending"),
        "snapshot": ("the node freezes the mounted filesystem for the copy", ""),
        "unpublish": ("NodeUnpublishVolume", ""),
        "unstage": ("NodeUnstageVolume", ""),
        "detach": ("ControllerUnpublishVolume reads A's report of the volume (release or "
                   "revoke)", ""),
    },
    "csi-provisioner": {
        "create": ("it calls CreateVolume and makes the PV", ""),
        "delete": ("it calls DeleteVolume and removes the PV", ""),
    },
    "csi-attacher": {
        "attach": ("it calls ControllerPublishVolume", ""),
        "detach": ("it calls ControllerUnpublishVolume", ""),
    },
    "csi-resizer": {"expand": ("it calls ControllerExpandVolume", "")},
    "csi-snapshotter": {"snapshot": ("it calls CreateSnapshot", "")},
    "node-driver-registrar": {
        p: ("the kubelet reaches the driver through the registration; a restarted registrar "
            "registers again", "node-resize-pending" if p == "expand" else "")
        for p in ("stage", "publish", "expand", "unpublish", "unstage")
    },
}  # fmt: skip

_NO_NODE = "no node takes part: in the shared pool the controller alone serves it"
_POD_BOUND = "the pod is already bound to its node; nothing is scheduled in this phase"
_NODE_ONLY = "a node-side call between the kubelet and the node plugin"
_NO_RUNTIME = "no container starts or stops in this phase"


def _all_but(on: tuple[str, ...], reason: str) -> dict[str, str]:
    return {p.name: reason for p in PHASES if p.name not in on}


# Every other (component, phase): why the component is not on that phase's path.
OFF_PATH: dict[str, dict[str, str]] = {
    "kube-controller-manager": {
        "publish": "the kubelet publishes once the node lists the volume as attached",
        "expand": "external-resizer expands CSI claims; the controller manager leaves them to it",
        "snapshot": "the snapshot-controller and csi-snapshotter, not the controller manager",
        "unpublish": "the kubelet's own, from the pod's deletion",
        "unstage": "the kubelet's own, after the unpublish",
    },
    "kube-scheduler": _all_but(("create", "attach"), _POD_BOUND),
    "kubelet": {
        "create": _NO_NODE,
        "attach": "ControllerPublishVolume is the attacher's; the kubelet only waits for it",
        "snapshot": "the controller asks the node plugin to freeze through the pool, not through "
                    "the kubelet",
        "delete": _NO_NODE,
    },
    "containerd": {
        "create": _NO_NODE,
        "attach": "the pod's containers start only after NodePublishVolume",
        "stage": "the pod's containers start only after NodePublishVolume",
        "expand": "the filesystem grows under the running container: " + _NO_RUNTIME,
        "snapshot": "the copy is made under the running container: " + _NO_RUNTIME,
        "unstage": "the containers stopped before the unpublish",
        "detach": "the containers stopped before the unpublish",
        "delete": _NO_NODE,
    },
    "controller": {
        "publish": _NODE_ONLY,
        "unpublish": _NODE_ONLY,
        "unstage": _NODE_ONLY,
    },
    "node-plugin": {"create": _NO_NODE, "delete": _NO_NODE},
    "csi-provisioner": _all_but(("create", "delete"), "the provisioner only creates and deletes"),
    "csi-attacher": _all_but(("attach", "detach"), "the attacher only attaches and detaches"),
    "csi-resizer": _all_but(("expand",), "the resizer only expands claims"),
    "csi-snapshotter": _all_but(("snapshot",), "the snapshotter only cuts and deletes snapshots"),
    "node-driver-registrar": {
        "create": _NO_NODE,
        "attach": "the controller side attaches; the registration is the kubelet's way to the "
                  "node plugin",
        "snapshot": "the freeze goes through the pool, not through the kubelet",
        "detach": "the controller side detaches, after the kubelet's last call",
        "delete": _NO_NODE,
    },
}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    component: str
    phase: str
    why: str
    trigger: str

    @property
    def id(self) -> str:
        return f"{self.component}/{self.phase}"

    @property
    def wffc(self) -> bool:
        """The claim waits for its first consumer (the scheduler's create cell)."""
        return self.component == "kube-scheduler" and self.phase == "create"


def component(name: str) -> Component:
    for c in COMPONENTS:
        if c.name == name:
            return c
    raise KeyError(name)


def phase(name: str) -> Phase:
    for p in PHASES:
        if p.name == name:
            return p
    raise KeyError(name)


def cells() -> list[Cell]:
    """Every cell, phase by phase: a component's kills are then a whole phase apart, long enough
    for the kubelet's restart back-off of a container (10 s, doubled per crash, forgotten after
    10 minutes) to have reset between them."""
    out = []
    for p in PHASES:
        for c in COMPONENTS:
            on = ON_PATH.get(c.name, {}).get(p.name)
            if on is not None:
                out.append(Cell(c.name, p.name, on[0], on[1] or p.trigger))
    return out


def off_path() -> list[tuple[str, str, str]]:
    """(component, phase, reason) of every pair that is no cell, in the matrix's order."""
    return [
        (c.name, p.name, OFF_PATH[c.name][p.name])
        for p in PHASES
        for c in COMPONENTS
        if p.name in OFF_PATH.get(c.name, {})
    ]


def select(spec: str) -> list[Cell]:
    """The cells a --cells SPEC names, in run order. SPEC: `all`, or items separated by commas,
    each COMPONENT/PHASE where either side may be `*`; a bare COMPONENT means COMPONENT/*. A
    wildcard takes only the cells; naming a pair that is no cell is an error that gives its
    reason."""
    everything = cells()
    if spec.strip() in ("", "all", "*", "*/*"):
        return everything
    chosen: set[str] = set()
    names = [c.name for c in COMPONENTS]
    phases = [p.name for p in PHASES]
    for item in (i.strip() for i in spec.split(",")):
        if not item:
            continue
        comp, _, ph = item.partition("/")
        ph = ph or "*"
        if comp != "*" and comp not in names:
            raise ValueError(f"no component {comp!r} (known: {', '.join(names)})")
        if ph != "*" and ph not in phases:
            raise ValueError(f"no phase {ph!r} (known: {', '.join(phases)})")
        if comp != "*" and ph != "*" and ph in OFF_PATH.get(comp, {}):
            raise ValueError(f"{comp}/{ph} is no cell: {OFF_PATH[comp][ph]}")
        chosen |= {c.id for c in everything if comp in ("*", c.component) and ph in ("*", c.phase)}
    return [c for c in everything if c.id in chosen]


def describe() -> str:
    """What --list prints: the phases, the cells with their trigger, the pairs that are no cell."""
    lines = ["phases (action; done when):"]
    lines += [f"  {p.name:<10} {p.action}; {p.done}" for p in PHASES]
    run = cells()
    lines += ["", f"cells ({len(run)}; kill -9 {{when}}):"]
    lines += [f"  {c.id:<38} {TRIGGERS[c.trigger]}" for c in run]
    off = off_path()
    lines += ["", f"not cells ({len(off)}; the component is not on the phase's path):"]
    lines += [f"  {comp + '/' + ph:<38} {why}" for comp, ph, why in off]
    return "\n".join(lines)
