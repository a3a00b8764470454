"""The controller's view of a volume's health (the v1.12 VolumeCondition and CSI v1.13's
ControllerGetVolumeHealth): the backing file as the pool has it, and what the volume's holders
have seen of its health.

The controller can't see a node's filesystems (in the chart's shape it runs on another machine),
so each node plugin counts the filesystem errors of the volumes it has staged and reports them in
its heartbeat (NodeAgent.beat); the controller reads the heartbeats of the volume's holders."""

from __future__ import annotations

from collections.abc import Iterable

from csi_hostpath.core import conditions, ledger_rules
from csi_hostpath.core.conditions import Problem, VolumeHealth
from csi_hostpath.core.model import Volume
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import Pool


def node_io_errors(layout: PoolLayout, volume_id: str, holders: Iterable[str]) -> str:
    """The message for the first holder whose heartbeat reports I/O errors on the volume, or ""."""
    for node_id in sorted(set(holders)):
        entry = layout.reported(node_id, volume_id)
        if entry is None:
            continue
        count = entry.get(conditions.IO_ERRORS_KEY)
        if isinstance(count, int) and count > 0:
            device = str(entry.get("device", "its loop device"))
            return conditions.io_errors(count, str(entry.get("fs_type", "")), device, node_id)
    return ""


def fenced(volume_id: str, layout: PoolLayout) -> list[Problem]:
    """A node that still reports the volume staged under a token the ledger revoked (a
    force-detach it has not acted on yet): the volume may be written by two nodes."""
    staged = {}
    for beat in layout.heartbeats(volume_id):
        entry = beat.volumes.get(volume_id)
        generation = entry.get("generation") if entry else None
        if isinstance(generation, int):
            staged[beat.node_id] = generation
    if not staged:
        return []
    stagers = ledger_rules.fenced_stagers(layout.read_lease(volume_id), staged)
    return [
        Problem(VolumeHealth.INACCESSIBLE, conditions.FENCED, conditions.fenced_elsewhere(n, g))
        for n, g in stagers
    ]


# The message of a volume with no problem, for the v1.12 VolumeCondition.
HEALTHY = "backing file present, size as recorded"


def volume_problems(
    volume: Volume, holders: Iterable[str], pool: Pool, layout: PoolLayout
) -> list[Problem]:
    """The volume's problems, worst first, from its backing file, the pool's room, and its
    holders' heartbeats: the v1.12 VolumeCondition is the first one, v1.13's health all."""
    path = layout.volume_file(volume.volume_id)
    size = pool.size(path)
    if size is None:
        return [
            Problem(
                VolumeHealth.INACCESSIBLE,
                "BackingFileMissing",
                f"the backing file {path} is missing: the volume's data is gone; restore it "
                "from a snapshot or delete the volume",
            )
        ]
    found = fenced(volume.volume_id, layout)
    if size != volume.capacity_bytes:
        # Cut short, the file lost the volume's tail; grown, it only holds more than promised.
        kind = VolumeHealth.DATA_LOSS if size < volume.capacity_bytes else VolumeHealth.DEGRADED
        found.append(
            Problem(
                kind,
                "SizeChanged",
                f"the backing file is {size} bytes, but the volume should have "
                f"{volume.capacity_bytes}; it was changed outside the driver",
            )
        )
    if pool.free_bytes() == 0:
        found.append(
            Problem(VolumeHealth.DEGRADED, "PoolFull", conditions.pool_full(str(layout.root)))
        )
    if seen := node_io_errors(layout, volume.volume_id, holders):
        found.append(Problem(VolumeHealth.DATA_LOSS, "FilesystemErrors", seen))
    return found
