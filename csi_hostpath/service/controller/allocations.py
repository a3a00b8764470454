"""The thin files' allocations for the capacity rule, cached: one stat per volume on every
CreateVolume cost 25 ms with 2,000 volumes in the pool.

What the rule needs is the pool's room: free space plus what the thin files have written.
Writes and trims move bytes between the two and leave the room as it is, so a cached
allocation is only ever counted beside a free space it can't overstate:

    room = sum(cached allocations) + min(free now, free when cached)

A write since lowers free now, so the room comes out lower than the truth: a promise may be
refused sooner (then checked again on fresh numbers), never made twice. A trim raises free now,
and the min keeps free when cached: the room is the truth. A file no entry accounts for (someone
else's) lowers free now and the room, as it does on fresh numbers; one removed is counted once
everything is measured again.

"Free when cached" follows every entry measured again, so that the sum stays the room it was: a
new entry's allocation (a volume created, restored or cloned) is taken from it, a removed one's
(a volume deleted) given back, and a changed one's difference taken. An entry is measured again
when the service says so (on every create, expansion and delete), at every use while it is live
(a volume a node holds, when the caller asks for exact numbers; an inline volume's file), and
all of them after MAX_AGE seconds or after a copy. A copy (snapshot, clone, restore) takes room
no entry accounts for while volumes may be trimmed, which the min can't tell apart: for as long
as it runs, its source's allocation comes off the free space counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager

MAX_AGE = 30.0


class Allocations:
    def __init__(
        self,
        measure: Callable[[str], int],
        clock: Callable[[], float] = time.monotonic,
        max_age: float = MAX_AGE,
    ) -> None:
        self._measure = measure  # an entry's allocated bytes, 0 once its file is gone
        self._clock = clock
        self._max_age = max_age
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, int]] = {}  # key -> (size, allocated) when measured
        self._written = 0  # the sum of min(allocated, size) over the entries
        self._free = 0  # free when cached, following every entry measured since
        self._measured_at: float | None = None  # None: measure everything at the next use
        self._changed: set[str] = set()
        self._live: set[str] = set()  # the entries live at the previous use
        self._copying = 0  # what the copies under way may still take

    def changed(self, key: str) -> None:
        """The service created, expanded or deleted this volume: measure it again."""
        with self._lock:
            self._changed.add(key)

    def drop(self) -> None:
        """Measure everything again at the next use."""
        with self._lock:
            self._measured_at = None

    @contextmanager
    def copying(self, nbytes: int) -> Iterator[None]:
        with self._lock:
            self._copying += nbytes
        try:
            yield
        finally:
            with self._lock:
                self._copying -= nbytes
                self._measured_at = None

    def written(
        self,
        free_now: int,
        everything: Callable[[], Iterable[tuple[str, int]]],
        size_of: Callable[[str], int | None],
        live: Collection[str] = (),
    ) -> tuple[int, int]:
        """(what the entries have written, each counted up to its size; the free space to count
        beside it). free_now was measured just before. everything lists every thin file's
        (key, size) as they are now, and is asked only when everything is measured again;
        otherwise only the entries the service changed, the live ones and those live at the
        previous use (an inline file since removed, a volume since released) are measured
        again, each with size_of (its size now, None once it is gone). So a use costs the same
        with 10 entries or 2,000."""
        with self._lock:
            now = self._clock()
            if self._measured_at is None or now - self._measured_at > self._max_age:
                self._entries.clear()
                self._written = 0
                for key, size in everything():
                    self._add(key, size)
                self._free = free_now
                self._measured_at = now
                self._changed.clear()
            else:
                for key in self._changed.union(live, self._live):
                    self._remove(key)
                    size_now = size_of(key)
                    if size_now is not None:
                        self._add(key, size_now)
                self._changed.clear()
            self._live = set(live)
            return self._written, min(free_now, self._free - self._copying)

    def _add(self, key: str, size: int) -> None:
        allocated = self._measure(key)
        self._entries[key] = (size, allocated)
        self._written += min(allocated, size)
        self._free -= allocated

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            size, allocated = entry
            self._written -= min(allocated, size)
            self._free += allocated
