"""The SnapshotMetadata service (changed-block tracking), answered from what the pool already knows.

Allocated blocks are the snapshot file's data extents (SEEK_DATA/SEEK_HOLE). A delta between two
snapshots of one volume compares only what may differ: ranges where either has data, minus the
ranges both map to the same physical blocks (reflinked on an xfs pool, so equal without a read).
What is left is compared block by block, streaming, so the answer is exact: a block is in the
delta only if its bytes differ. Ranges are whole 4 KiB blocks, variable length, in order."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.core import byte_ranges
from csi_hostpath.core.byte_ranges import BLOCK, Range
from csi_hostpath.core.errors import CapacityOutOfRange, InvalidRequest, SnapshotNotFound
from csi_hostpath.core.model import Snapshot
from csi_hostpath.core.naming import is_snapshot_id
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.system.extents import data_extents, physical_extents, shared_ranges

DEFAULT_MAX_RESULTS = 1024
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Metadata:
    capacity_bytes: int
    pages: Iterator[list[Range]]


class SnapshotMetadataService:
    def __init__(self, ctx: ControllerContext) -> None:
        self.store = ctx.store
        self.layout = ctx.layout

    def _snapshot(self, snapshot_id: str) -> tuple[Snapshot, Path]:
        snap = self.store.get_snapshot(snapshot_id) if is_snapshot_id(snapshot_id) else None
        path = self.layout.snapshot_file(snapshot_id) if snap is not None else None
        if snap is None or path is None or not path.exists():
            raise SnapshotNotFound(f"snapshot {snapshot_id[:200]!r} does not exist")
        return snap, path

    @staticmethod
    def _check(starting_offset: int, max_results: int, capacity: int) -> int:
        if starting_offset < 0 or starting_offset > capacity:
            raise CapacityOutOfRange(
                f"starting_offset {starting_offset} is outside the volume (0 to {capacity})"
            )
        if max_results < 0:
            raise InvalidRequest(f"max_results {max_results} is negative")
        return max_results or DEFAULT_MAX_RESULTS

    def allocated(self, snapshot_id: str, starting_offset: int, max_results: int) -> Metadata:
        snap, path = self._snapshot(snapshot_id)
        per_page = self._check(starting_offset, max_results, snap.size_bytes)
        ranges = byte_ranges.align(data_extents(path), limit=snap.size_bytes)
        return Metadata(
            snap.size_bytes,
            byte_ranges.pages(byte_ranges.from_offset(ranges, starting_offset), per_page),
        )

    def delta(
        self, base_id: str, target_id: str, starting_offset: int, max_results: int
    ) -> Metadata:
        base, base_path = self._snapshot(base_id)
        target, target_path = self._snapshot(target_id)
        if base.source_volume_id != target.source_volume_id:
            raise InvalidRequest(
                f"snapshots {base_id} and {target_id} are of different volumes "
                f"({base.source_volume_id}, {target.source_volume_id})"
            )
        per_page = self._check(starting_offset, max_results, target.size_bytes)
        changed = _changed_blocks(base_path, target_path, target.size_bytes, starting_offset)
        return Metadata(target.size_bytes, byte_ranges.pages(changed, per_page))


def _candidates(base: Path, target: Path, capacity: int) -> list[Range]:
    """Where the two may differ: data in either, less what both share physically."""
    either = byte_ranges.align(data_extents(base) + data_extents(target), limit=capacity)
    a, b = physical_extents(base), physical_extents(target)
    if a is None or b is None:
        return either
    # Only whole blocks inside a shared range are known equal; partial ones are compared.
    whole = []
    for offset, length in shared_ranges(a, b):
        start = -(-offset // BLOCK) * BLOCK
        end = (offset + length) // BLOCK * BLOCK
        if end > start:
            whole.append((start, end - start))
    return byte_ranges.subtract(either, whole)


def _changed_blocks(
    base: Path, target: Path, capacity: int, starting_offset: int
) -> Iterator[Range]:
    candidates = list(byte_ranges.from_offset(_candidates(base, target, capacity), starting_offset))
    fd_base = os.open(base, os.O_RDONLY | os.O_CLOEXEC)
    fd_target = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
    try:
        run: Range | None = None
        for offset, length in candidates:
            for chunk_offset in range(offset, offset + length, READ_CHUNK):
                size = min(READ_CHUNK, offset + length - chunk_offset)
                old = os.pread(fd_base, size, chunk_offset).ljust(size, b"\0")
                new = os.pread(fd_target, size, chunk_offset).ljust(size, b"\0")
                if old == new:
                    continue
                for block in range(0, size, BLOCK):
                    if old[block : block + BLOCK] == new[block : block + BLOCK]:
                        continue
                    at = chunk_offset + block
                    span = min(BLOCK, size - block)
                    if run is not None and run[0] + run[1] == at:
                        run = (run[0], run[1] + span)
                    else:
                        if run is not None:
                            yield run
                        run = (at, span)
        if run is not None:
            yield run
    finally:
        os.close(fd_base)
        os.close(fd_target)
