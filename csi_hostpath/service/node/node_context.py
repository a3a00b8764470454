"""What the node plugin's parts share, made once by the daemon from its Config
(daemon/node_role.py, the one place the node role's flags are read). Each part takes the context
and keeps what it uses, so beside it a constructor names only the part's own collaborators (the
mounts, the agent, the freezes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.service.inflight import InFlight
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System


@dataclass(frozen=True, slots=True)
class NodeContext:
    node_id: str
    store: Store
    system: System
    layout: PoolLayout
    # One per node: an RPC, a fence and a freeze of one volume never run at once.
    inflight: InFlight
    state_dir: Path
    pool_dir: Path
    # The flags the parts read.
    topology: Mapping[str, str]  # NodeGetInfo's: this node's segment in local scope, else none
    max_volumes_per_node: int  # 0: no cap beyond the loop devices left (core/volume_limit.py)
    max_volume_size: int
    allow_inline_volumes: bool
    max_inline_size: int
    heartbeat_interval: float
    fence_interval: float
    node_grace: float
    max_freeze_seconds: float
