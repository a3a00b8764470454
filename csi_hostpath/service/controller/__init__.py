"""The controller: ControllerService (service.py) and its parts, which share one
ControllerContext (controller_context.py): the publish ledger and force-detach
(publish_ledger.py), snapshots (snapshots.py), placement (topology.py), capacity
(pool_capacity.py, allocations.py), the pool as the truth (backing_files.py, open_pool.py),
revocations (revocation.py), volume conditions (volume_condition.py), freezes asked of a node
(remote_freeze.py, reentrant_freeze.py), ModifyVolume (modify.py), group snapshots
(group_snapshots.py) and snapshot metadata (snapshot_metadata_service.py)."""

from csi_hostpath.service.controller.publish_ledger import (
    PublishLedger,
    import_node_events,
    sync_lease,
)
from csi_hostpath.service.controller.service import ControllerService, CreatedVolume

__all__ = [
    "ControllerService",
    "CreatedVolume",
    "PublishLedger",
    "import_node_events",
    "sync_lease",
]
