"""What the thin-capacity rule costs, and that the store's running size total stays exact.

What the thin-capacity rule costs: a CreateVolume's promise and a GetCapacity do the same
sqlite work and the same stats with 2,000 volumes in the catalog as with 10; and the store's
running total of the volumes' sizes is the sum of the rows through every change, a reopen, a
crash in the middle of a transaction, and a hand edit that bypassed it."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from csi_hostpath.core.model import Volume
from csi_hostpath.core.naming import new_volume_id
from csi_hostpath.service.controller.pool_capacity import Capacity
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.fake import fake_system
from tests.unit.builders import controller_context

MiB = 1 << 20


class CountingStore(Store):
    def fill(self, count: int, size: int = MiB, prefix: str = "fill") -> None:
        """count rows in one transaction (a CreateVolume each would be count fsyncs)."""
        with self._tx() as db:
            db.executemany(
                "INSERT INTO volumes (volume_id, name, capacity_bytes, capabilities, fs_type, "
                "parameters, created_at) VALUES (?, ?, ?, '[]', '', '{}', 0)",
                [(new_volume_id(), f"{prefix}-{n}", size) for n in range(count)],
            )

    def steps(self, work: Callable[[], object]) -> int:
        """sqlite virtual-machine instructions that work ran: they grow with every row read."""
        count = [0]

        def step() -> int:
            count[0] += 1
            return 0

        with self._lock:
            self._db.set_progress_handler(step, 1)
        try:
            work()
        finally:
            with self._lock:
                self._db.set_progress_handler(None, 1)
        return count[0]


def _cost(tmp_path: Path, volumes: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(sqlite steps, stats) of one round of the pool bench: a CreateVolume's promise and row,
    the service's word that it changed, then a GetCapacity."""
    root = tmp_path / f"pool-{volumes}"
    layout = PoolLayout(root)
    layout.ensure()
    system = fake_system(root)
    stats = [0]
    allocated = system.pool.allocated

    def counted(path: Path) -> int:
        stats[0] += 1
        return allocated(path)

    monkeypatch.setattr(system.pool, "allocated", counted)
    store = CountingStore(tmp_path / f"state-{volumes}.db")
    try:
        store.fill(volumes)
        capacity = Capacity(controller_context(store, system, layout, overcommit_ratio=1000))
        capacity.available()  # the first use measures everything
        stats[0] = 0

        def one_round() -> None:
            volume = Volume(new_volume_id(), "new", MiB, (), "")
            with capacity.promise(volume.name, volume.capacity_bytes):
                store.insert_volume_unless_named(volume)
            capacity.allocations.changed(volume.volume_id)
            capacity.available()

        return store.steps(one_round), stats[0]
    finally:
        store.close()


def test_a_create_and_a_capacity_cost_the_same_with_2000_volumes_as_with_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed on the old code: every call read each volume's (ID, size) row, about 40,000 more
    sqlite steps with 2,000 volumes than with 10."""
    few_steps, few_stats = _cost(tmp_path, 10, monkeypatch)
    many_steps, many_stats = _cost(tmp_path, 2000, monkeypatch)
    assert many_stats == few_stats <= 2
    # A deeper b-tree costs the insert and the lookups a few steps more, not one per row.
    assert many_steps <= few_steps + 200, (few_steps, many_steps)


def _rows_sum(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT COALESCE(SUM(capacity_bytes), 0) FROM volumes").fetchone()[0])
    finally:
        db.close()


def test_the_total_is_the_sum_of_the_rows_through_every_change(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = CountingStore(path)
    try:
        assert store.promised_bytes() == 0
        store.fill(5, 3 * MiB)
        volume = Volume(new_volume_id(), "grown", MiB, (), "")
        store.insert_volume_unless_named(volume)
        assert store.insert_volume_unless_named(volume) is not None  # a retry adds nothing
        store.set_capacity(volume.volume_id, 7 * MiB)
        assert store.promised_bytes() == _rows_sum(path) == 22 * MiB
        store.fill(1, MiB, "taken")
        with pytest.raises(sqlite3.IntegrityError):  # a failed transaction moves nothing:
            store.fill(2, MiB, "taken")  # its first row went in, its second's name is taken
        store.delete_volume(volume.volume_id)
        store.delete_volume(volume.volume_id)
        assert store.promised_bytes() == _rows_sum(path) == 16 * MiB
    finally:
        store.close()
    store = CountingStore(path)
    try:
        assert store.promised_bytes() == _rows_sum(path) == 16 * MiB
    finally:
        store.close()


def test_a_crash_mid_transaction_leaves_the_total_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()
    # Another process inserts a row (and so, by trigger, the total) and dies before committing.
    crash = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
        'db.execute("INSERT INTO volumes (volume_id, name, capacity_bytes, capabilities, '
        "fs_type, parameters, created_at) VALUES ('vol-x', 'x', 5, '[]', '', '{}', 0)\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", crash, str(path)], check=False, timeout=60)
    assert done.returncode == -signal.SIGKILL
    store = Store(path)
    try:
        assert store.promised_bytes() == _rows_sum(path) == 0
        assert store.get_volume("vol-x") is None
    finally:
        store.close()


def test_a_total_bypassed_by_hand_is_derived_again_from_the_rows_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = CountingStore(path)
    store.fill(3, 2 * MiB)
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE volume_totals SET capacity_bytes = 1")
    db.commit()
    db.close()
    store = CountingStore(path)
    try:
        assert store.promised_bytes() == _rows_sum(path) == 6 * MiB
    finally:
        store.close()
