"""What the controller does with the pool before it serves: claim it for this database, then
rebuild the index from what its files say (the pool is the truth)."""

from __future__ import annotations

from pathlib import Path

from csi_hostpath.service.controller._log import log
from csi_hostpath.store.backing.adopt_pool import AdoptReport, adopt_pool
from csi_hostpath.store.backing.owner import PoolClaim, claim_pool
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout


def open_pool(
    store: Store, layout: PoolLayout, state_dir: Path, *, take_over: bool = False
) -> tuple[PoolClaim, AdoptReport]:
    """Claim the pool for this database, then re-adopt what its files say; before serving."""
    claim = claim_pool(store, layout, state_dir, take_over=take_over)
    try:
        if claim.took_over is not None:
            log.warning(
                "pool %s: taken over from database %s (state directory %s)",
                layout.root,
                claim.took_over.get("db_id"),
                claim.took_over.get("state_dir"),
            )
        report = adopt_pool(store, layout)
    except BaseException:
        claim.release()
        raise
    return claim, report
