"""The checks of every cell, partition case and chaos run, as pure functions over what was sampled
(each node's mount table, the host's loop devices, the ledger's holds, the API's objects): a
check returns the violations it found, and the samplers only read. Crafted samples test them
offline (tests/k8s/faults/test_faults_checks.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from csi_hostpath.core.naming import is_volume_id, loop_tag_prefix, volume_id_from_tag
from csi_hostpath.system.base import MountEntry

# What a violation is of.
DOUBLE_WRITER = "double-writer"  # two nodes with the volume mounted read-write at once
DOUBLE_HOLD = "double-hold"  # the ledger grants two nodes a single-writer volume at once
DISAGREE = "ledger-vs-attachments"  # the ledger and the VolumeAttachments tell two stories
LEAK = "leak"  # a loop device, mount or pool file that nothing owns any more
DATA = "data"  # the data read after the fault differ from what was written before it

# Access modes under which several nodes may write (the ledger's names).
MULTI_WRITER_MODES = frozenset({"MULTI_NODE_MULTI_WRITER"})
_CSI_PATH_MARKS = ("/kubernetes.io~csi/", "/plugins/kubernetes.io/csi/")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str
    # When it was seen (time.time()); 0 for a check at rest.
    at: float = 0.0


@dataclass(frozen=True)
class HostLoop:
    """A loop device as the host's sysfs shows it (read without opening the device)."""

    name: str  # loop3
    maj_min: str  # 7:3
    backing: str  # the backing file as the kernel names it; "" when unbound


@dataclass(frozen=True)
class Hold:
    """A row of `csi-hostpath ledger list`."""

    volume: str
    node: str
    mode: str
    readonly: bool
    generation: int


def volume_of_backing(path: str) -> str | None:
    """The volume a backing file is: its name is `<volume-id>.img` in the pool's volumes/, in
    whichever mount namespace the kernel names it from, maybe ` (deleted)`."""
    base = path.removesuffix(" (deleted)").rsplit("/", 1)[-1]
    if base.endswith(".img") and is_volume_id(base[: -len(".img")]):
        return base[: -len(".img")]
    return None


def loop_volumes(loops: Iterable[HostLoop]) -> dict[str, str]:
    """Each loop device bound to a volume's file, keyed by its numbers (a filesystem mounted from
    it) and by its name (a bind of its device node, for a block volume)."""
    found: dict[str, str] = {}
    for loop in loops:
        vol = volume_of_backing(loop.backing) if loop.backing else None
        if vol:
            found[loop.maj_min] = vol
            found[loop.name] = vol
    return found


def volume_of_mount(entry: MountEntry, loops: Mapping[str, str]) -> str | None:
    if entry.device_number in loops:
        return loops[entry.device_number]
    # A block volume's device node bound into place: the mount's root is the node's name.
    return loops.get(entry.root.rsplit("/", 1)[-1]) if entry.root != "/" else None


def node_use(
    mounts: Mapping[str, Sequence[MountEntry]], loops: Mapping[str, str]
) -> dict[str, dict[str, bool]]:
    """volume -> {node: whether some mount of it there is read-write}, for every node that has
    any mount of the volume's loop device (a node's own device or another's on the same file)."""
    use: dict[str, dict[str, bool]] = {}
    for node, entries in mounts.items():
        for e in entries:
            vol = volume_of_mount(e, loops)
            if vol is None:
                continue
            nodes = use.setdefault(vol, {})
            nodes[node] = nodes.get(node, False) or "rw" in e.options
    return use


def in_use(use: Mapping[str, Mapping[str, bool]]) -> dict[str, set[str]]:
    return {vol: set(nodes) for vol, nodes in use.items()}


def double_writers(
    use: Mapping[str, Mapping[str, bool]], at: float = 0.0, exempt: Iterable[str] = ()
) -> list[Violation]:
    """A volume mounted read-write on more than one node in one sample."""
    skip = set(exempt)
    out = []
    for vol, nodes in sorted(use.items()):
        writers = sorted(n for n, rw in nodes.items() if rw)
        if len(writers) > 1 and vol not in skip:
            out.append(Violation(DOUBLE_WRITER, f"{vol} read-write on {', '.join(writers)}", at))
    return out


def parse_ledger_list(text: str) -> list[Hold]:
    """`ledger list`'s table: VOLUME NODE MODE READONLY GENERATION, then columns read by no one
    here (since, heartbeat age, name)."""
    holds = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5 and is_volume_id(parts[0]) and parts[4].isdigit():
            holds.append(Hold(parts[0], parts[1], parts[2], parts[3] == "yes", int(parts[4])))
    return holds


def double_holds(holds: Iterable[Hold], at: float = 0.0) -> list[Violation]:
    """The ledger granting write to more than one node of a volume no multi-writer mode covers."""
    writers: dict[str, set[str]] = {}
    for h in holds:
        if not h.readonly and h.mode not in MULTI_WRITER_MODES and "READER" not in h.mode:
            writers.setdefault(h.volume, set()).add(h.node)
    return [
        Violation(DOUBLE_HOLD, f"the ledger grants {vol} to {', '.join(sorted(nodes))}", at)
        for vol, nodes in sorted(writers.items())
        if len(nodes) > 1
    ]


def pv_handles(pvs: Iterable[Mapping[str, Any]], driver: str) -> dict[str, str]:
    """PV name -> volume handle, for the driver's PVs."""
    out = {}
    for pv in pvs:
        csi = (pv.get("spec") or {}).get("csi") or {}
        if csi.get("driver") == driver:
            out[str(pv["metadata"]["name"])] = str(csi.get("volumeHandle"))
    return out


def attached(
    vas: Iterable[Mapping[str, Any]], handles: Mapping[str, str], driver: str
) -> set[tuple[str, str]]:
    """(volume handle, node) of each of the driver's VolumeAttachments that is attached."""
    out = set()
    for va in vas:
        spec = va.get("spec") or {}
        pv = (spec.get("source") or {}).get("persistentVolumeName")
        if spec.get("attacher") == driver and (va.get("status") or {}).get("attached") and pv:
            out.add((handles.get(str(pv), f"<PV {pv} not found>"), str(spec.get("nodeName"))))
    return out


def ledger_disagreements(
    holds: Iterable[Hold], attachments: set[tuple[str, str]]
) -> list[Violation]:
    held = {(h.volume, h.node) for h in holds}
    return [
        Violation(DISAGREE, f"the ledger holds {v} on {n}; no VolumeAttachment is attached")
        for v, n in sorted(held - attachments)
    ] + [
        Violation(DISAGREE, f"{v} is attached to {n}; the ledger holds nothing of it there")
        for v, n in sorted(attachments - held)
    ]


def csi_targets(entries: Iterable[MountEntry]) -> list[str]:
    """Mount points the kubelet made for CSI volumes (staging, pod targets, block maps)."""
    return [e.mount_point for e in entries if any(m in e.mount_point for m in _CSI_PATH_MARKS)]


def handle_sha(handle: str) -> str:
    """The name the kubelet gives a volume's staging directory (csi_attacher.go,
    makeDeviceMountPath: sha256 of the volume handle)."""
    return hashlib.sha256(handle.encode()).hexdigest()


def leaked_mounts(
    targets: Mapping[str, Sequence[str]], pv_names: Iterable[str], handles: Iterable[str]
) -> list[Violation]:
    """A CSI mount whose path names no existing PV: neither a PV's name (pod targets, the older
    staging path pv/NAME/globalmount) nor the sha256 of an existing PV's handle (the staging path
    of current kubelets)."""
    known = set(pv_names) | {handle_sha(h) for h in handles}
    out = []
    for node, paths in sorted(targets.items()):
        for path in paths:
            keys = {s for s in path.split("/") if s.startswith("pvc-") or _HEX64.fullmatch(s)}
            if not keys & known:
                out.append(Violation(LEAK, f"mount {path} on {node}: its volume is gone"))
    return out


def leaked_loops(
    tagged: Iterable[tuple[str, str]], nodes: Iterable[str], use: Mapping[str, set[str]]
) -> list[Violation]:
    """A loop device the driver tagged for one of these nodes (csihp:<node key>:<volume>) while
    that node has no mount of the volume. At rest, where every volume is either in a pod or
    gone, that device is left over. Devices of other nodes and other programs are not ours."""
    prefixes = {loop_tag_prefix(n): n for n in nodes}
    out = []
    for device, tag in sorted(tagged):
        node = next((n for p, n in prefixes.items() if tag.startswith(p)), None)
        vol = volume_id_from_tag(tag)
        if node is not None and vol is not None and node not in use.get(vol, set()):
            out.append(Violation(LEAK, f"{device} of {vol} tagged for {node}, not mounted there"))
    return out


def orphan_files(
    pool_ids: Iterable[str], known: Iterable[str], before: Iterable[str], what: str = "volume"
) -> list[Violation]:
    """A pool file (volume or snapshot) that no PV (VolumeSnapshotContent) names and that was not
    there before the run (a Retain volume of an earlier run is its user's)."""
    rest = set(pool_ids) - set(known) - set(before)
    return [Violation(LEAK, f"pool {what} file {i} has no owner") for i in sorted(rest)]


def data_kept(what: str, before: str, after: str) -> list[Violation]:
    if before and before == after:
        return []
    return [
        Violation(DATA, f"{what}: checksum {after or '(none)'} after, {before or '(none)'} before")
    ]
