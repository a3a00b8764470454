"""Each volume's mutable parameters, kept in the pool beside its file (POOL/mutable/<vol>.json).

The pool is where the controller and every node meet (leases and heartbeats live there too), so a
change that the controller writes here reaches the node that holds the volume on its next pass.
Written durably: unlike a lease, nothing else holds this record."""

from __future__ import annotations

import json
from pathlib import Path

from csi_hostpath.core.mutable import Tuning
from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.store.pool_layout import write_atomically


class MutableRecords:
    def __init__(self, pool_root: Path) -> None:
        self.root = pool_root / "mutable"

    def _path(self, volume_id: str) -> Path:
        if not is_volume_id(volume_id):
            raise ValueError(f"not a volume ID: {volume_id!r}")
        return self.root / f"{volume_id}.json"

    def read(self, volume_id: str) -> Tuning:
        """The volume's tuning; an empty one when it has none (or its record is unreadable)."""
        try:
            data = json.loads(self._path(volume_id).read_text())
        except (FileNotFoundError, ValueError):
            return Tuning()
        return Tuning.from_json(data) if isinstance(data, dict) else Tuning()

    def version(self, volume_id: str) -> bytes:
        """The record's bytes (empty when absent): a change marker that, unlike an mtime with
        the kernel's coarse clock, never misses two writes in one tick. The record is tiny."""
        try:
            return self._path(volume_id).read_bytes()
        except FileNotFoundError:
            return b""

    def write(self, volume_id: str, tuning: Tuning) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        body = json.dumps(tuning.to_json(), sort_keys=True).encode()
        write_atomically(self._path(volume_id), body)

    def remove(self, volume_id: str) -> None:
        if is_volume_id(volume_id):
            self._path(volume_id).unlink(missing_ok=True)
