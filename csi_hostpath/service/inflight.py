"""The per-volume in-flight guard: one operation per key at a time; a second is refused, not
queued, so the CO retries later instead of piling up threads behind a slow mkfs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from csi_hostpath.core.errors import Busy


class InFlight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}

    @contextmanager
    def hold(self, key: str, operation: str) -> Iterator[None]:
        with self._lock:
            running = self._held.get(key)
            if running is not None:
                raise Busy(f"an operation is already in progress for {key}: {running}; retry later")
            self._held[key] = operation
        try:
            yield
        finally:
            with self._lock:
                del self._held[key]
