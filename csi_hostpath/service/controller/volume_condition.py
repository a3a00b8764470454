"""What the nodes have seen of a volume's health, for the controller's VolumeCondition.

The controller can't see a node's filesystems (in the chart's shape it runs on another machine),
so each node plugin counts the filesystem errors of the volumes it has staged and reports them in
its heartbeat (NodeAgent.beat); the controller reads the heartbeats of the volume's holders."""

from __future__ import annotations

from collections.abc import Iterable

from csi_hostpath.core import conditions
from csi_hostpath.store.pool import PoolLayout


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
