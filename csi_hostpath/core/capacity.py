"""The pool's reserve: new work stops before the pool is full, so teardown always has room.

A thin pool fills as volumes are written, and the default layout puts state.db on the same
filesystem. CreateVolume, CreateSnapshot and expansion are refused while the pool has less than
the reserve free; teardown (which only frees space) is never refused.

What the pool can still promise (GetCapacity, and the check CreateVolume makes) is decided here
too, from numbers the service measured: no I/O in this module."""

from __future__ import annotations

import math

from csi_hostpath.core.errors import DriverError, NoCapacity
from csi_hostpath.core.sizes import describe_bytes

POOL_RESERVE_BYTES = 8 << 20


def refuse_below_reserve(free_bytes: int, action: str, reserve: int = POOL_RESERVE_BYTES) -> None:
    if free_bytes < reserve:
        raise NoCapacity(
            f"the pool has {describe_bytes(max(free_bytes, 0))} free, below the "
            f"{describe_bytes(reserve)} kept so teardown always has room; {action} is refused. "
            "Delete volumes or snapshots, or grow the pool"
        )


# ----- thin capacity: what the pool can still promise -----
DEFAULT_OVERCOMMIT_RATIO = 1.0


def check_ratio(ratio: float) -> float:
    """The overcommit ratio: finite and above zero (below 1.0 keeps a margin unpromised)."""
    if not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"the overcommit ratio must be a finite number above 0, not {ratio!r}")
    return ratio


def promisable_sums(
    free_bytes: int,
    written: int,
    promised: int,
    ratio: float = DEFAULT_OVERCOMMIT_RATIO,
    reserve: int = POOL_RESERVE_BYTES,
) -> int:
    """Bytes that a new volume may still be promised, from two sums over the volumes: what they
    have written (each counted up to its size: an allocation past the size, from filesystem
    metadata blocks, promises nothing more) and their sizes.

    The pool's room for volumes is its free space plus what volumes have already written; the
    sizes of all volumes never exceed that room times the ratio. With the ratio at 1.0 this is
    the free space minus what the existing sparse volumes may still grow into, so a thin pool
    never promises a byte it can't write. The reserve stays unpromised (teardown's room). The
    service keeps both sums as running totals, so a call costs the same with 10 volumes in the
    pool or 2,000."""
    check_ratio(ratio)
    room = max(0, free_bytes - reserve) + written
    return max(0, math.floor(room * ratio) - promised)


def refuse_unpromisable(
    size_bytes: int, available: int, ratio: float, refused: type[DriverError] = NoCapacity
) -> None:
    if size_bytes > available:
        raise refused(
            f"the pool can promise {describe_bytes(available)} more (free space, minus what "
            f"existing thin volumes may still grow into, times --overcommit-ratio {ratio:g}); "
            f"{describe_bytes(size_bytes)} was asked for"
        )
