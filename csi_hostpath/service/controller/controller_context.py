"""What the controller's parts share, made once by the daemon from its Config
(daemon/controller_role.py, the one place the controller role's flags are read). Each part takes
the context and keeps what it uses, so beside it a constructor names only the part's own
collaborators (the capacity book, the freeze, the freeze channel)."""

from __future__ import annotations

from dataclasses import dataclass

from csi_hostpath.core.model import PoolScope
from csi_hostpath.service.inflight import InFlight
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System


@dataclass(frozen=True, slots=True)
class ControllerContext:
    node_id: str  # the node whose pool this is, in local scope
    store: Store
    system: System
    layout: PoolLayout
    # One per controller: a create, a delete, a copy and a ledger change of one volume never run
    # at once (ControllerService, its Snapshots and PublishLedger share it).
    inflight: InFlight
    # The flags the parts read.
    pool_scope: PoolScope
    topology_key: str
    own_node: str | None  # the node this same process serves (mode all), else None
    max_volume_size: int  # 0: limited only by the pool
    max_volumes_per_node: int  # 0: no cap
    overcommit_ratio: float
    node_grace: float
    node_lost_after: float
    max_freeze_seconds: float
