"""Controller use-cases: volumes in the pool.

Order of operations (so that a crash at any line heals on a retry or on restart):
create: decide → create the sparse file (idempotent) → commit the row → record the mutable
parameters.
delete: refuse while published → remove the file → delete the row → remove the mutable record.
publish and unpublish: publish_ledger.py (PublishLedger), which the servicer calls directly; it is
made from the same ControllerContext, whose in-flight guard it shares with delete.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from csi_hostpath.core import access
from csi_hostpath.core.capacity import refuse_below_reserve
from csi_hostpath.core.conditions import Problem
from csi_hostpath.core.context_keys import FS_TYPE_KEY
from csi_hostpath.core.errors import (
    CapacityOutOfRange,
    InvalidRequest,
    NoCapacity,
    StillPublished,
    Unsupported,
    VolumeNotFound,
)
from csi_hostpath.core.model import (
    Capability,
    ContentSource,
    PoolScope,
    Snapshot,
    TopologyRequirement,
    Volume,
)
from csi_hostpath.core.mutable import Tuning
from csi_hostpath.core.naming import is_snapshot_id, is_volume_id, new_volume_id
from csi_hostpath.core.sizes import describe_bytes
from csi_hostpath.service.controller._log import log
from csi_hostpath.service.controller.backing_files import discard, making
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.controller.group_snapshots import GroupSnapshots
from csi_hostpath.service.controller.pool_capacity import Capacity
from csi_hostpath.service.controller.reentrant_freeze import Freeze
from csi_hostpath.service.controller.snapshots import Snapshots
from csi_hostpath.service.controller.topology import (
    choose_segment,
    missing_source,
    serves,
    snapshot_topology,
)
from csi_hostpath.service.controller.volume_condition import volume_problems
from csi_hostpath.service.lost_volumes import loss_of, release_lost
from csi_hostpath.store.backing import file_identity
from csi_hostpath.store.groups import GroupRecords
from csi_hostpath.store.mutable_records import MutableRecords
from csi_hostpath.system.base import NoSpace


@dataclass(frozen=True, slots=True)
class CreatedVolume:
    volume: Volume
    volume_context: dict[str, str]
    topology: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ListedVolume:
    volume: Volume
    published_node_ids: list[str]


class ControllerService:
    def __init__(
        self,
        ctx: ControllerContext,
        freeze: Freeze | None = None,
    ) -> None:
        self.ctx = ctx  # for the placement rules; its flags: max_volume_size, node_lost_after
        self.store = ctx.store
        self.system = ctx.system
        self.layout = ctx.layout
        self.inflight = ctx.inflight
        # Freezes a volume's filesystem while it is copied, when the volume is staged on this
        # same process's node (mode all); elsewhere a copy is crash-consistent at best.
        self.freeze = freeze or (lambda volume_id: nullcontext())
        self.capacity = Capacity(ctx)
        self.snapshots = Snapshots(ctx, self.capacity, self.freeze)
        # Group snapshots are made of this controller's snapshots, under its freeze.
        self.groups = GroupSnapshots(GroupRecords(ctx.layout.root), self.snapshots, self.freeze)
        # What a VolumeAttributesClass asks for, in the pool where the node reads it: written
        # once a volume is created, removed once it is deleted (modify.py changes it).
        self.tunings = MutableRecords(ctx.layout.root)

    # ----- helpers -----
    def _topology(self, volume: Volume) -> list[dict[str, str]]:
        if self.ctx.pool_scope == PoolScope.LOCAL and volume.node_id:
            return [{self.ctx.topology_key: volume.node_id}]
        return []

    def created(self, volume: Volume) -> CreatedVolume:
        context = {FS_TYPE_KEY: volume.fs_type} if volume.fs_type else {}
        return CreatedVolume(volume, context, self._topology(volume))

    def _require_volume(self, volume_id: str) -> Volume:
        volume = self.store.get_volume(volume_id) if is_volume_id(volume_id) else None
        if volume is None:
            raise VolumeNotFound(f"volume {volume_id!r} does not exist")
        return volume

    # ----- volumes -----
    def create_volume(
        self,
        name: str,
        capabilities: Sequence[Capability],
        required_bytes: int,
        limit_bytes: int,
        parameters: Mapping[str, str],
        content_source: ContentSource | None = None,
        topology: TopologyRequirement | None = None,
        tuning: Tuning | None = None,
    ) -> CreatedVolume:
        """The volume made (or found, for a repeat), then its mutable parameters recorded."""
        created = self._create_volume(
            name, capabilities, required_bytes, limit_bytes, parameters, content_source, topology
        )
        if tuning is not None and tuning != Tuning():
            self.tunings.write(created.volume.volume_id, tuning)
        return created

    def _create_volume(
        self,
        name: str,
        capabilities: Sequence[Capability],
        required_bytes: int,
        limit_bytes: int,
        parameters: Mapping[str, str],
        content_source: ContentSource | None,
        topology: TopologyRequirement | None,
    ) -> CreatedVolume:
        for cap in capabilities:
            access.check_capability(cap)
        fs_type = access.volume_fs_type(capabilities)
        size = access.round_capacity(required_bytes, limit_bytes, fs_type, self.ctx.max_volume_size)
        with self.inflight.hold(f"name:{name}", "CreateVolume"):
            existing = self.store.get_volume_by_name(name)
            if existing is not None:
                access.check_same_volume(
                    existing, capabilities, required_bytes, limit_bytes, parameters, content_source
                )
                # The row is committed only after the file exists, so a match is complete.
                return self.created(existing)
            choose_segment(self.ctx, topology)
            source_file: Path | None = None
            requested = required_bytes
            if content_source is not None:
                source_file, source_size, floor = self._content_source(content_source, fs_type)
                # CSI's OUT_OF_RANGE example: "a volume smaller than the source snapshot".
                if limit_bytes and limit_bytes < source_size:
                    raise CapacityOutOfRange(
                        f"the source holds {describe_bytes(source_size)}, more than limit_bytes "
                        f"{describe_bytes(limit_bytes)}: a volume can't be restored into less "
                        "than its source"
                    )
                # The source reports the request it was made with (its floor) as its size, which
                # this driver may have rounded up: a request at that floor gets the whole source.
                if required_bytes and required_bytes < floor and size < source_size:
                    held = describe_bytes(source_size)
                    if floor != source_size:
                        held += f" (its claim asked {describe_bytes(floor)})"
                    raise CapacityOutOfRange(
                        f"the source holds {held}, more than the {describe_bytes(size)} asked "
                        "for: a volume can't be restored into less than its source; ask for at "
                        "least its size, or for none"
                    )
                # With no size asked for, a restore or clone is as large as its source.
                size = max(size, source_size) if required_bytes else source_size
                requested = max(required_bytes, floor)
            refuse_below_reserve(self.system.pool.free_bytes(), "CreateVolume")
            volume = Volume(
                volume_id=new_volume_id(),
                name=name,
                capacity_bytes=size,
                capabilities=tuple(capabilities),
                fs_type=fs_type,
                parameters=dict(parameters),
                content_source=content_source,
                node_id=self.ctx.node_id if self.ctx.pool_scope == PoolScope.LOCAL else None,
                created_at=time.time(),
                requested_bytes=requested,
            )
            path = self.layout.volume_file(volume.volume_id)
            try:
                # The file carries its identity before the record commits (the pool is the truth).
                with (
                    self.capacity.promise(name, size),
                    making(self.system.pool, path, file_identity.volume_identity(volume)) as stamp,
                ):
                    if source_file is None:
                        self.system.pool.create(path, size)
                    else:
                        with self.capacity.allocations.copying(
                            self.system.pool.allocated(source_file)
                        ):
                            self._copy_from_source(content_source, source_file, path, size)
                    stamp()
                    raced = self.store.insert_volume_unless_named(volume)
            except NoSpace as e:
                raise NoCapacity(f"the pool has no room for {describe_bytes(size)}: {e}") from e
            finally:
                self.capacity.allocations.changed(volume.volume_id)
            if raced is not None:  # another process won the name between our check and insert
                discard(self.system.pool, path)
                return self.created(raced)
            log.info(
                "created volume %s name=%s size=%d fs=%s",
                volume.volume_id,
                name,
                size,
                fs_type or "block",
            )
            return self.created(volume)

    def _content_source(self, source: ContentSource, fs_type: str) -> tuple[Path, int, int]:
        """The file to copy from, its size, and the least a copy may ask for (the source's
        restore_floor); NOT_FOUND when the source is gone."""
        if source.kind == "snapshot":
            snap = (
                self.store.get_snapshot(source.source_id)
                if is_snapshot_id(source.source_id)
                else None
            )
            if snap is None:
                raise missing_source(self.ctx, "snapshot", source.source_id)
            origin = self.store.get_volume(snap.source_volume_id)  # None: deleted, fs unknown
            access.check_source_fs(snap.snapshot_id, origin.fs_type if origin else None, fs_type)
            return self.layout.snapshot_file(snap.snapshot_id), snap.size_bytes, snap.restore_floor
        volume = self.store.get_volume(source.source_id) if is_volume_id(source.source_id) else None
        if volume is None:
            if not is_volume_id(source.source_id):
                raise VolumeNotFound(f"source volume {source.source_id!r} does not exist")
            raise missing_source(self.ctx, "volume", source.source_id)
        access.check_source_fs(volume.volume_id, volume.fs_type, fs_type)
        path = self.layout.volume_file(volume.volume_id)
        return path, volume.capacity_bytes, volume.restore_floor

    def _copy_from_source(
        self, source: ContentSource | None, source_file: Path, dest: Path, size: int
    ) -> None:
        if not source_file.exists():
            raise VolumeNotFound(f"the backing file of the source {source_file.name} is missing")
        if source is not None and source.kind == "volume":
            with (
                self.inflight.hold(source.source_id, "CreateVolume (clone source)"),
                self.freeze(source.source_id),
            ):
                self.system.pool.copy_sparse(source_file, dest)
        else:
            self.system.pool.copy_sparse(source_file, dest)
        # The filesystem inside grows to the new size on its next stage.
        self.system.pool.grow(dest, size)

    def delete_volume(self, volume_id: str) -> None:
        """The volume gone, then its mutable parameters' record."""
        self._delete_volume(volume_id)
        self.tunings.remove(volume_id)

    def _delete_volume(self, volume_id: str) -> None:
        if not is_volume_id(volume_id):
            return  # never ours, so already gone
        with self.inflight.hold(volume_id, "DeleteVolume"):
            holders = self.store.publications(volume_id=volume_id)
            volume = self.store.get_volume(volume_id)
            loss = volume and loss_of(volume, self.store, self.layout, self.ctx.node_lost_after)
            if volume and loss:  # its node can't give its holds back: revoke them, audited
                release_lost(self.store, volume, loss)
            elif holders:
                raise StillPublished(
                    f"volume {volume_id} is still published to "
                    f"{', '.join(repr(h.node_id) for h in holders)}; unpublish it first"
                )
            discard(self.system.pool, self.layout.volume_file(volume_id))
            self.layout.remove_lease(volume_id)
            self.store.delete_volume(volume_id)
            self.capacity.allocations.changed(volume_id)
            log.info("deleted volume %s", volume_id)

    def validate_capabilities(
        self, volume_id: str, capabilities: Sequence[Capability]
    ) -> tuple[bool, str]:
        volume = self._require_volume(volume_id)
        for cap in capabilities:
            try:
                access.check_capability(cap)
            except (InvalidRequest, Unsupported) as e:
                return False, str(e)  # a refusal here means "not confirmed", not an error
            if cap.access_type not in {c.access_type for c in volume.capabilities}:
                return (
                    False,
                    f"volume {volume_id} was not created for {cap.access_type.value} access",
                )
            if cap.fs_type and volume.fs_type and cap.fs_type != volume.fs_type:
                return False, f"volume {volume_id} holds {volume.fs_type}, not {cap.fs_type}"
        return True, ""

    def get_capacity(self, topology: Mapping[str, str] | None = None) -> tuple[int, int]:
        """(bytes still promisable, maximum volume size) of the pool, for a topology segment."""
        if topology and not serves(self.ctx, topology):
            return 0, 0  # this pool can't place volumes in another node's segment
        return self.capacity.available()

    def list_volumes(self, starting_token: str, max_entries: int) -> tuple[list[ListedVolume], str]:
        if max_entries < 0:
            raise InvalidRequest("max_entries must not be negative")
        page, next_token = self.store.list_volumes_held(starting_token, max_entries)
        return [ListedVolume(volume, holders) for volume, holders in page], next_token

    # ----- expansion and health -----
    def expand_volume(
        self, volume_id: str, required_bytes: int, limit_bytes: int
    ) -> tuple[int, bool]:
        """Grow the backing file; (new capacity, whether the node must follow up)."""
        volume = self._require_volume(volume_id)
        if required_bytes <= 0 and limit_bytes <= 0:
            raise InvalidRequest("capacity_range with required_bytes is required")
        if required_bytes <= 0:
            # "At most limit_bytes" asks for no growth; below the current size it asks a shrink.
            if limit_bytes < volume.capacity_bytes:
                raise CapacityOutOfRange(
                    f"volume {volume_id} holds {volume.capacity_bytes} bytes; a limit of "
                    f"{limit_bytes} would shrink it, and volumes never shrink"
                )
            return volume.capacity_bytes, False
        with self.inflight.hold(volume_id, "ControllerExpandVolume"):
            volume = self._require_volume(volume_id)
            path = self.layout.volume_file(volume_id)
            held = self.system.pool.size(path)
            # Never a shrink: a record that satisfies the request answers it (with the node step:
            # a lost answer's retry) once the file holds it too; an older copy of it holds less.
            size = volume.capacity_bytes
            if required_bytes > size:
                size = access.round_capacity(
                    required_bytes, limit_bytes, volume.fs_type, self.ctx.max_volume_size
                )
            elif held is None or held >= size:
                return size, True
            grow_by = size - (held or 0)
            # The growth is promised as a new volume would be (spec: OUT_OF_RANGE when it can't).
            with self.capacity.promise(f"grow:{volume_id}", grow_by, CapacityOutOfRange):
                self.system.pool.grow(path, size)
                # The identity follows the size first: the file never says less than the record.
                requested = max(volume.requested_bytes, required_bytes)
                grown = file_identity.volume_identity(volume)
                file_identity.write_identity(
                    path, {**grown, "size_bytes": size, "requested_bytes": requested}
                )
                self.store.set_capacity(volume_id, size, requested)
            self.capacity.allocations.changed(volume_id)
            log.info("expanded %s from %d to %d bytes", volume_id, volume.capacity_bytes, size)
            # The node must refresh the loop device's size, and grow the filesystem on it.
            return size, True

    def problems(self, volume: Volume, holders: Sequence[str]) -> list[Problem]:
        """The volume's backing store's problems, and what its holders saw, worst first."""
        return volume_problems(volume, holders, self.system.pool, self.layout)

    def get_volume(self, volume_id: str) -> ListedVolume:
        volume = self._require_volume(volume_id)
        holders = [p.node_id for p in self.store.publications(volume_id=volume_id)]
        return ListedVolume(volume, holders)

    # ----- snapshots (snapshots.py) -----
    def create_snapshot(
        self, source_volume_id: str, name: str, topology: TopologyRequirement | None = None
    ) -> Snapshot:
        choose_segment(self.ctx, topology)  # a local pool cuts snapshots for its node only
        return self.snapshots.create_snapshot(source_volume_id, name)

    def snapshot_topology(self, snapshot_id: str) -> list[dict[str, str]]:
        return snapshot_topology(self.ctx, snapshot_id)
