"""CreateSnapshot, DeleteSnapshot, ListSnapshots: a snapshot is a sparse copy of the volume's
backing file in POOL/snapshots, made under the source's in-flight guard (so DeleteVolume can't
remove the file mid-copy) and, where the volume is staged in this process, its frozen filesystem.
"""

from __future__ import annotations

import time

from csi_hostpath.core.capacity import refuse_below_reserve
from csi_hostpath.core.errors import (
    Incompatible,
    InvalidRequest,
    NoCapacity,
    SnapshotNotFound,
    VolumeNotFound,
)
from csi_hostpath.core.model import Snapshot, Volume
from csi_hostpath.core.naming import is_snapshot_id, is_volume_id, new_snapshot_id
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.backing_files import discard, making
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.controller.pool_capacity import Capacity
from csi_hostpath.service.controller.reentrant_freeze import Freeze
from csi_hostpath.store.backing import file_identity
from csi_hostpath.system.base import NoSpace


class Snapshots:
    def __init__(
        self,
        ctx: ControllerContext,
        capacity: Capacity,
        freeze: Freeze,
    ) -> None:
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self.inflight = ctx.inflight
        self.capacity = capacity
        self.freeze = freeze

    def _require_volume(self, volume_id: str) -> Volume:
        volume = self.store.get_volume(volume_id) if is_volume_id(volume_id) else None
        if volume is None:
            raise VolumeNotFound(f"volume {volume_id!r} does not exist")
        return volume

    def create_snapshot(self, source_volume_id: str, name: str) -> Snapshot:
        with self.inflight.hold(f"snapshot:{name}", "CreateSnapshot"):
            existing = self.store.get_snapshot_by_name(name)
            if existing is not None:
                if existing.source_volume_id != source_volume_id:
                    raise Incompatible(
                        f"a snapshot named {name!r} already exists ({existing.snapshot_id}) of "
                        f"volume {existing.source_volume_id}, not {source_volume_id}"
                    )
                return existing
            volume = self._require_volume(source_volume_id)
            return self.snapshot_locked(volume, name)

    def snapshot_locked(self, volume: Volume, name: str) -> Snapshot:
        # The source is held too, so a DeleteVolume can't remove the file mid-copy.
        with self.inflight.hold(volume.volume_id, "CreateSnapshot (source)"):
            source = self.layout.volume_file(volume.volume_id)
            if not source.exists():
                raise VolumeNotFound(f"volume {volume.volume_id} has lost its backing file")
            snapshot = Snapshot(
                snapshot_id=new_snapshot_id(volume.node_id),
                name=name,
                source_volume_id=volume.volume_id,
                size_bytes=volume.capacity_bytes,
                created_at=time.time(),
                restore_bytes=volume.restore_floor,
            )
            dest = self.layout.snapshot_file(snapshot.snapshot_id)
            refuse_below_reserve(self.system.pool.free_bytes(), "CreateSnapshot")
            body = file_identity.snapshot_identity(snapshot, volume.fs_type)
            try:
                with making(self.system.pool, dest, body) as stamp:
                    with (
                        self.capacity.allocations.copying(self.system.pool.allocated(source)),
                        self.freeze(volume.volume_id),
                    ):
                        self.system.pool.copy_sparse(source, dest)
                    stamp()
                    raced = self.store.insert_snapshot_unless_named(snapshot)
            except NoSpace as e:
                raise NoCapacity(f"the pool has no room for the snapshot's data: {e}") from e
            if raced is not None:
                discard(self.system.pool, dest)
                return raced
            log.info(
                "created snapshot %s of %s (%d bytes allocated)",
                snapshot.snapshot_id,
                volume.volume_id,
                self.system.pool.allocated(dest),
            )
            return snapshot

    def delete_snapshot(self, snapshot_id: str) -> None:
        if not is_snapshot_id(snapshot_id):
            return
        with self.inflight.hold(snapshot_id, "DeleteSnapshot"):
            discard(self.system.pool, self.layout.snapshot_file(snapshot_id))
            self.store.delete_snapshot(snapshot_id)
            self.capacity.allocations.drop()  # its room is promisable again at once

    def list_snapshots(
        self, starting_token: str, max_entries: int, snapshot_id: str, source_volume_id: str
    ) -> tuple[list[Snapshot], str]:
        if max_entries < 0:
            raise InvalidRequest("max_entries must not be negative")
        if (snapshot_id and not is_snapshot_id(snapshot_id)) or (
            source_volume_id and not is_volume_id(source_volume_id)
        ):
            return [], ""  # an ID this driver never issued matches nothing
        return self.store.list_snapshots(
            starting_token, max_entries, snapshot_id=snapshot_id, source=source_volume_id
        )

    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        snap = self.store.get_snapshot(snapshot_id) if is_snapshot_id(snapshot_id) else None
        if snap is None:
            raise SnapshotNotFound(f"snapshot {snapshot_id!r} does not exist")
        return snap
