"""The pool's reserve: new work stops before the pool is full, so teardown always has room.

A thin pool fills as volumes are written, and the default layout puts state.db on the same
filesystem. CreateVolume, CreateSnapshot and expansion are refused while the pool has less than
the reserve free; teardown (which only frees space) is never refused."""

from __future__ import annotations

from csi_hostpath.core.errors import NoCapacity

POOL_RESERVE_BYTES = 8 << 20


def refuse_below_reserve(free_bytes: int, action: str, reserve: int = POOL_RESERVE_BYTES) -> None:
    if free_bytes < reserve:
        raise NoCapacity(
            f"the pool has {free_bytes} bytes free, below the {reserve} bytes kept so teardown "
            f"always has room; {action} is refused. Delete volumes or snapshots, or grow the pool"
        )
