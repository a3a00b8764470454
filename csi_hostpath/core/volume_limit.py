"""How many volumes a node can hold: NodeGetInfo's max_volumes_per_node, which the kubelet
writes into CSINode.spec.drivers[].allocatable.count (again every
nodeAllocatableUpdatePeriodSeconds, where the CSIDriver sets it), and NodeGetInfo's answer.

The limit is counted from the kernel at each call: the kubelet asks again every
nodeAllocatableUpdatePeriodSeconds (and after a ControllerPublishVolume that answered
RESOURCE_EXHAUSTED), so loop devices taken or given back by others reach the scheduler. The one
scan of the loop devices is the node service's (Loop.census, system/); what is made of it is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The smallest limit CSI can say. max_volumes_per_node 0 means "not reported": the kubelet then
# sets no allocatable count, and the scheduler places any number of volumes on the node.
SMALLEST_LIMIT = 1


def node_volume_limit(*, flag: int, held: int, free: int, creatable: int) -> int:
    """The node's limit: the volumes it holds (each already has its loop device) plus the loop
    devices it could still get (free ones now, and the ones the kernel may still create), capped
    by --max-volumes-per-node where that is set (flag > 0).

    Loop devices bound by anyone else on the kernel (another node plugin on a shared kernel,
    losetup) are in neither count, so they lower the limit; this node's own devices are counted
    once, as held volumes, so staging a volume does not lower it. Never 0: a node with no device
    left says 1, because 0 would tell the kubelet there is no limit at all."""
    room = held + max(free, 0) + max(creatable, 0)
    if flag > 0:
        room = min(flag, room)
    return max(room, SMALLEST_LIMIT)


def loop_room(*, devices: int, bound: int, ceiling: int) -> tuple[int, int]:
    """(free, creatable): devices there now but unbound, and devices the kernel may still make."""
    return max(devices - bound, 0), max(ceiling - devices, 0)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    max_volumes: int  # volume_limit's answer
    topology: dict[str, str]  # this node's segment in local scope; none in shared scope


class LoopCounts(Protocol):
    """One scan of the kernel's loop devices (system/base.py's LoopCensus)."""

    @property
    def devices(self) -> int: ...
    @property
    def bound(self) -> int: ...
    @property
    def ours(self) -> int: ...
    @property
    def ceiling(self) -> int: ...


def volume_limit(census: LoopCounts, max_volumes_per_node: int) -> tuple[int, str]:
    """The node's limit from one census, and how it was counted (for the log)."""
    free, creatable = loop_room(devices=census.devices, bound=census.bound, ceiling=census.ceiling)
    limit = node_volume_limit(
        flag=max_volumes_per_node, held=census.ours, free=free, creatable=creatable
    )
    counted = (
        f"{census.ours} held, {free} loop devices free, {creatable} more the kernel may make, "
        f"{census.bound - census.ours} bound by others, --max-volumes-per-node "
        f"{max_volumes_per_node}"
    )
    return limit, counted
