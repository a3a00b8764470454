"""The messages of a volume's condition (VolumeCondition in ControllerGetVolume, ListVolumes and
NodeGetVolumeStats), written once so both sides say the same thing. Pure: no I/O."""

from __future__ import annotations

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
