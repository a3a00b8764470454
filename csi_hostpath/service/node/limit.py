"""NodeGetInfo's answer, and its volume limit, counted from the kernel at each call: the kubelet
asks again every nodeAllocatableUpdatePeriodSeconds (and after a ControllerPublishVolume that
answered RESOURCE_EXHAUSTED), so loop devices taken or given back by others reach the scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from csi_hostpath.core.naming import loop_tag_prefix
from csi_hostpath.core.volume_limit import loop_room, node_volume_limit
from csi_hostpath.service.node._log import log
from csi_hostpath.system.base import Loop


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    max_volumes: int  # volume_limit's answer
    topology: dict[str, str]  # this node's segment in local scope; none in shared scope


def volume_limit(loop: Loop, node_id: str, max_volumes_per_node: int) -> int:
    census = loop.census(loop_tag_prefix(node_id))
    free, creatable = loop_room(devices=census.devices, bound=census.bound, ceiling=census.ceiling)
    limit = node_volume_limit(
        flag=max_volumes_per_node, held=census.ours, free=free, creatable=creatable
    )
    log.debug(
        "volume limit %d: %d held, %d loop devices free, %d more the kernel may make, "
        "%d bound by others, --max-volumes-per-node %d",
        limit,
        census.ours,
        free,
        creatable,
        census.bound - census.ours,
        max_volumes_per_node,
    )
    return limit
