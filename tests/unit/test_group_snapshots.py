"""Group snapshot bookkeeping on in-memory snapshots: retries, mismatches, clean-up, freezes.

Group snapshot bookkeeping (service/controller/group_snapshots.py) on in-memory snapshots:
retries, mismatches, clean-up after a failed member, and that every member is frozen before any
is cut."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from csi_hostpath.core.errors import Incompatible, InvalidRequest, SnapshotNotFound
from csi_hostpath.core.model import Snapshot
from csi_hostpath.service.controller.group_snapshots import GroupSnapshots
from csi_hostpath.service.controller.reentrant_freeze import ReentrantFreeze
from csi_hostpath.store.groups import GroupRecords

A, B = "vol-" + "a" * 32, "vol-" + "b" * 32


class FakeSnapshots:
    def __init__(self, log: list[str], fail_on: str = "") -> None:
        self.log = log
        self.fail_on = fail_on
        self.made: dict[str, Snapshot] = {}

    def create_snapshot(self, source_volume_id: str, name: str) -> Snapshot:
        if source_volume_id == self.fail_on:
            raise OSError("copy failed")
        for snap in self.made.values():
            if snap.name == name:
                return snap
        snap_id = f"snap-{len(self.made):032x}"
        self.log.append(f"cut {source_volume_id}")
        self.made[snap_id] = Snapshot(snap_id, name, source_volume_id, 1, 0.0)
        return self.made[snap_id]

    def delete_snapshot(self, snapshot_id: str) -> None:
        self.made.pop(snapshot_id, None)

    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        return self.made[snapshot_id]


def make(tmp_path: Path, fail_on: str = "") -> tuple[GroupSnapshots, FakeSnapshots, list[str]]:
    log: list[str] = []

    @contextmanager
    def freeze(volume_id: str) -> Iterator[None]:
        log.append(f"freeze {volume_id}")
        try:
            yield
        finally:
            log.append(f"thaw {volume_id}")

    snaps = FakeSnapshots(log, fail_on)
    groups = GroupSnapshots(GroupRecords(tmp_path), snaps, ReentrantFreeze(freeze))
    return groups, snaps, log


def test_every_member_is_frozen_before_any_is_cut_and_all_thaw(tmp_path: Path) -> None:
    groups, _, log = make(tmp_path)
    groups.create("g", [B, A])
    assert log[:2] == [f"freeze {A}", f"freeze {B}"]
    assert log[2:4] == [f"cut {B}", f"cut {A}"]
    assert sorted(log[4:]) == [f"thaw {A}", f"thaw {B}"]


def test_a_retry_returns_the_same_group_and_other_sources_are_already_exists(
    tmp_path: Path,
) -> None:
    groups, snaps, _ = make(tmp_path)
    first = groups.create("g", [A, B])
    assert groups.create("g", [B, A]).group_id == first.group_id
    assert len(snaps.made) == 2
    with pytest.raises(Incompatible):
        groups.create("g", [A])


def test_a_failed_member_leaves_nothing(tmp_path: Path) -> None:
    groups, snaps, log = make(tmp_path, fail_on=B)
    with pytest.raises(OSError):
        groups.create("g", [A, B])
    assert snaps.made == {} and GroupRecords(tmp_path).all() == []
    assert log.count(f"thaw {A}") == 1 and log.count(f"thaw {B}") == 1


def test_get_and_delete_check_the_member_list(tmp_path: Path) -> None:
    groups, snaps, _ = make(tmp_path)
    record = groups.create("g", [A, B])
    with pytest.raises(InvalidRequest):
        groups.get(record.group_id, ["snap-" + "f" * 32])
    with pytest.raises(InvalidRequest):
        groups.delete_snapshot(record.snapshot_ids[0])
    groups.delete(record.group_id, record.snapshot_ids)
    assert snaps.made == {}
    with pytest.raises(SnapshotNotFound):
        groups.get(record.group_id, [])
    groups.delete(record.group_id, [])  # gone already: OK
