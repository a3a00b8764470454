"""Whether the pool can still promise a volume's size: the thin-pool rule lives in
core/capacity.py; this module measures its inputs (the pool's free space, every volume's size and
allocation) and keeps concurrent CreateVolume calls from promising the same bytes twice.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath.core.capacity import promisable_sums, refuse_unpromisable
from csi_hostpath.core.errors import DriverError, NoCapacity
from csi_hostpath.service.controller.allocations import Allocations
from csi_hostpath.service.controller.controller_context import ControllerContext


class Capacity:
    """The pool's promise book: measured on each call (the volumes' allocations through a
    conservative cache, service/controller/allocations.py; their sizes as the store's running
    total), serialised for the create path."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx  # its flags: overcommit_ratio, max_volume_size
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self._lock = threading.Lock()
        # CreateVolume name -> the size promised while its file exists but its row does not yet
        self._pending: dict[str, int] = {}
        pool, layout = self.system.pool, self.layout
        # Keys are volume IDs, and inline volumes' paths (POOL/inline/<node key>/vol-*.img).
        self.allocations = Allocations(
            lambda key: pool.allocated(
                Path(key) if key.startswith("/") else layout.volume_file(key)
            )
        )

    def _sums(self, free_now: int, live: Collection[str]) -> tuple[int, int, int]:
        """(free space to count, what the thin files have written, their sizes): from the
        store's running total and the cache's, so no call reads every volume's row."""
        pool = self.system.pool
        # Inline ephemeral volumes are thin files in the same pool (service/node/inline.py),
        # made by node plugins with no row here, and written to while they exist.
        inline = {
            str(path): size
            for path in self.layout.root.glob("inline/*/vol-*.img")
            if (size := pool.size(path)) is not None
        }

        def size_of(key: str) -> int | None:
            return inline.get(key) if key.startswith("/") else self.store.volume_size(key)

        written, free = self.allocations.written(
            free_now,
            lambda: [*self.store.volume_sizes(), *inline.items()],
            size_of,
            {*live, *inline},
        )
        # A volume being created is promised before its row exists; its file may have written
        # nothing yet.
        promised = self.store.promised_bytes() + sum(inline.values()) + sum(self._pending.values())
        return free, written, promised

    def available(self, exact: bool = True) -> tuple[int, int]:
        """(bytes still promisable, the largest volume that can be made now). Exact measures
        again the volumes nodes hold (GetCapacity's answer); otherwise their cached allocations
        may be low after writes, and so the answer (a promise, checked again before a refusal)."""
        free_now = self.system.pool.free_bytes()
        live = self.store.published_volume_ids() if exact else ()
        free, written, promised = self._sums(free_now, live)
        available = promisable_sums(free, written, promised, self.ctx.overcommit_ratio)
        limit = self.ctx.max_volume_size
        return available, min(available, limit) if limit else available

    @contextmanager
    def promise(
        self, name: str, size_bytes: int, refused: type[DriverError] = NoCapacity
    ) -> Iterator[None]:
        """Promise size_bytes to a volume being created (or grown, by that much), for as long as
        its row does not say so yet; `refused` (NoCapacity: RESOURCE_EXHAUSTED; an expansion
        passes CapacityOutOfRange) when the pool can't promise it."""
        with self._lock:
            available, _ = self.available(exact=False)
            if size_bytes > available:  # the cache errs low: refuse on fresh numbers only
                self.allocations.drop()
                available, _ = self.available()
            refuse_unpromisable(size_bytes, available, self.ctx.overcommit_ratio, refused)
            self._pending[name] = size_bytes
        try:
            yield
        finally:
            with self._lock:
                self._pending.pop(name, None)
