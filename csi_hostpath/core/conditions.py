"""The messages of a volume's condition (VolumeCondition in ControllerGetVolume, ListVolumes and
NodeGetVolumeStats), written once so both sides say the same thing, and the kinds CSI v1.13's
health RPCs type them with. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# The heartbeat's per-volume key for the count of filesystem errors the node has seen.
IO_ERRORS_KEY = "io_errors"


def io_errors(count: int, fs_type: str, device: str, node_id: str = "") -> str:
    """A volume whose filesystem saw write errors: the loop device failed a write (a thin pool
    that ran out of space is the usual cause) or the filesystem raised an error itself."""
    where = f" on node {node_id!r}" if node_id else ""
    return (
        f"I/O errors: the kernel recorded {count} {fs_type or 'filesystem'} error(s) or failed "
        f"write(s) on {device}{where}, as when the thin pool runs out of space; data written "
        "since may be lost. Free space in the pool, then unstage the volume and run fsck"
    )


def pool_full(root: str) -> str:
    return (
        f"the pool {root} is full: writes into unallocated parts of this thin volume fail with "
        "I/O errors; free space in the pool"
    )


FENCED = "Fenced"


def fenced_here(volume_id: str, generation: int) -> str:
    """A staging on this node whose hold the controller revoked (a force-detach)."""
    return (
        f"this node's hold on volume {volume_id} (generation {generation}) was revoked by a "
        "force-detach: another node may be given it, and this node cuts its I/O off at its "
        "next fence pass; unpublish and unstage it here, then publish it again to use it"
    )


def fenced_elsewhere(node_id: str, generation: int) -> str:
    """A volume a node still reports staged under a token the ledger revoked."""
    return (
        f"node {node_id!r} still has the volume staged under generation {generation}, which a "
        "force-detach revoked: it may still be writing. It cuts its I/O off at its next fence "
        "pass once it runs and reads its lease; until its heartbeat stops listing the volume, "
        "check that node (or that it is gone for good) before trusting the volume's data"
    )


class VolumeHealth(Enum):
    """CSI v1.13's VolumeHealthErrorType, by name."""

    DEGRADED = "DEGRADED"
    INACCESSIBLE = "INACCESSIBLE"
    DATA_LOSS = "DATA_LOSS"


class StorageHealth(Enum):
    """CSI v1.13's StorageHealthErrorType, by name."""

    STORAGE_DEGRADED = "STORAGE_DEGRADED"
    STORAGE_UNREACHABLE = "STORAGE_UNREACHABLE"


@dataclass(frozen=True, slots=True)
class Problem:
    """One adverse condition: its kind, a CamelCase reason, and the message that says what to
    do. The VolumeCondition of the v1.12 RPCs is the first problem's message."""

    kind: VolumeHealth | StorageHealth
    reason: str
    message: str


def storage_problems(root: str, writable: bool | None, free: int, reserve: int) -> list[Problem]:
    """The pool's own health from what the node sees of it (writable None: the directory is
    gone), the reserve being the room kept so teardown works on a full pool."""
    if writable is None:
        return [
            Problem(
                StorageHealth.STORAGE_UNREACHABLE,
                "PoolDirectoryGone",
                f"the pool directory {root} is gone: no volume of this node can be staged; "
                "mount or restore it",
            )
        ]
    found = []
    if not writable:
        found.append(
            Problem(
                StorageHealth.STORAGE_DEGRADED,
                "PoolReadOnly",
                f"the pool {root} is read-only: no volume can be created or grown, and thin "
                "volumes' writes into new blocks fail; remount it read-write",
            )
        )
    if free < reserve:
        found.append(
            Problem(
                StorageHealth.STORAGE_DEGRADED,
                "PoolBelowReserve",
                f"the pool {root} has {free} bytes free, less than the {reserve} kept for "
                "teardown: new volumes and snapshots are refused; free space in the pool",
            )
        )
    return found
