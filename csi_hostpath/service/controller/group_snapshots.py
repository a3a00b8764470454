"""Volume group snapshots (the GroupController service): one consistency point for many volumes.

Every member's filesystem is frozen first (in a fixed order, so two groups never deadlock), then
each member is cut with the ordinary snapshot path, then all thaw. Writes acknowledged before the
freeze are in every copy and none after it is in any, so a writer that writes A then B can never
be seen with B ahead of A. The thaw runs on every path out, errors included."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Protocol

from csi_hostpath.core.errors import Incompatible, InvalidRequest, SnapshotNotFound
from csi_hostpath.core.model import Snapshot
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.reentrant_freeze import Freeze
from csi_hostpath.store.groups import GroupRecord, GroupRecords, is_group_id, new_group_id


class MemberSnapshots(Protocol):
    """The controller's snapshot operations that a group is made of."""

    def create_snapshot(self, source_volume_id: str, name: str) -> Snapshot: ...
    def delete_snapshot(self, snapshot_id: str) -> None: ...
    def get_snapshot(self, snapshot_id: str) -> Snapshot: ...


def member_name(group_name: str, volume_id: str) -> str:
    # Deterministic, so a retried group finds the members it already cut; hashed, so any group
    # name fits the snapshot name's length limit.
    digest = hashlib.sha256(group_name.encode()).hexdigest()[:24]
    return f"group-{digest}/{volume_id}"


class GroupSnapshots:
    def __init__(self, records: GroupRecords, snapshots: MemberSnapshots, freeze: Freeze) -> None:
        self.records = records
        self.snapshots = snapshots
        self.freeze = freeze

    def create(self, name: str, source_volume_ids: Sequence[str]) -> GroupRecord:
        sources = list(source_volume_ids)
        if len(set(sources)) != len(sources):
            raise InvalidRequest("source_volume_ids name a volume twice")
        record = self.records.by_name(name)
        if record is not None:
            if sorted(record.source_volume_ids) != sorted(sources):
                raise Incompatible(
                    f"a group snapshot named {name!r} already exists ({record.group_id}) of "
                    f"volumes {record.source_volume_ids}"
                )
            if record.complete:
                return record
        else:
            record = GroupRecord(new_group_id(), name, sources, time.time())
            self.records.save(record)  # before any member: a crash leaves it findable
        try:
            with ExitStack() as frozen:
                for volume_id in sorted(sources):
                    frozen.enter_context(self.freeze(volume_id))
                for volume_id in sources:
                    snap = self.snapshots.create_snapshot(volume_id, member_name(name, volume_id))
                    record.members[volume_id] = snap.snapshot_id
        except BaseException:
            self._discard(record)
            raise
        record.complete = True
        self.records.save(record)
        log.info(
            "created group snapshot %s (%s) of %d volumes, one consistency point",
            record.group_id,
            name,
            len(sources),
        )
        return record

    def _discard(self, record: GroupRecord) -> None:
        """An unfinished group leaves nothing behind (the spec's SHOULD)."""
        for snapshot_id in record.members.values():
            try:
                self.snapshots.delete_snapshot(snapshot_id)
            except Exception:
                log.exception("group %s: could not delete member %s", record.group_id, snapshot_id)
                return  # keep the record, so a retry or DeleteVolumeGroupSnapshot finds them
        self.records.remove(record.group_id)

    def _check_members(self, record: GroupRecord, snapshot_ids: Sequence[str]) -> None:
        if snapshot_ids and sorted(snapshot_ids) != sorted(record.snapshot_ids):
            raise InvalidRequest(
                f"snapshot_ids {sorted(snapshot_ids)} do not match group snapshot "
                f"{record.group_id}'s members {sorted(record.snapshot_ids)}"
            )

    def get(self, group_id: str, snapshot_ids: Sequence[str]) -> tuple[GroupRecord, list[Snapshot]]:
        record = self.records.get(group_id) if is_group_id(group_id) else None
        if record is None or not record.complete:
            raise SnapshotNotFound(f"group snapshot {group_id[:200]!r} does not exist")
        self._check_members(record, snapshot_ids)
        return record, [self.snapshots.get_snapshot(s) for s in record.snapshot_ids]

    def delete(self, group_id: str, snapshot_ids: Sequence[str]) -> None:
        record = self.records.get(group_id) if is_group_id(group_id) else None
        if record is None:
            return  # the spec: gone already is OK
        self._check_members(record, snapshot_ids)
        for snapshot_id in record.snapshot_ids:
            self.snapshots.delete_snapshot(snapshot_id)
        self.records.remove(group_id)
        log.info("deleted group snapshot %s and its %d members", group_id, len(record.members))

    def group_ids(self, snapshot_ids: Sequence[str]) -> list[str]:
        """The group each snapshot belongs to ('' for none), from one read of the groups."""
        index = self.records.member_index()
        return [index.get(snapshot_id, "") for snapshot_id in snapshot_ids]

    def delete_snapshot(self, snapshot_id: str) -> None:
        """DeleteSnapshot: a group's member goes only with its group."""
        self._refuse_member_delete(snapshot_id)
        self.snapshots.delete_snapshot(snapshot_id)

    def _refuse_member_delete(self, snapshot_id: str) -> None:
        group_id = self.records.group_of(snapshot_id)
        if group_id:
            raise InvalidRequest(
                f"snapshot {snapshot_id} is part of group snapshot {group_id} and can't be deleted "
                "alone; delete the group with DeleteVolumeGroupSnapshot"
            )
