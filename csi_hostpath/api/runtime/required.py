"""The one owner of CSI's REQUIRED request fields.

spec.md marks fields REQUIRED on each request message, and each RPC's error table answers a
missing one with INVALID_ARGUMENT. That presence rule is checked here, once, for every RPC: the
call pipeline (api/runtime/pipeline.py) calls `check` before the servicer runs, so neither a
servicer nor a service tests for an empty ID or path again. Services check values only: an ID's
form, a path's shape, a size, a capability the driver serves.

A field that is required only sometimes (NodePublishVolume's staging_target_path, needed unless
the volume is inline) is a rule of the use-case and stays with its service."""

from __future__ import annotations

from google.protobuf.message import Message

from csi_hostpath.core.errors import InvalidRequest

# Request message → its REQUIRED fields, in the order a missing one is reported.
REQUIRED: dict[str, tuple[str, ...]] = {
    # Controller
    "CreateVolumeRequest": ("name", "volume_capabilities"),
    "DeleteVolumeRequest": ("volume_id",),
    "ControllerPublishVolumeRequest": ("volume_id", "node_id", "volume_capability"),
    "ControllerUnpublishVolumeRequest": ("volume_id",),
    "ValidateVolumeCapabilitiesRequest": ("volume_id", "volume_capabilities"),
    "CreateSnapshotRequest": ("name", "source_volume_id"),
    "DeleteSnapshotRequest": ("snapshot_id",),
    "GetSnapshotRequest": ("snapshot_id",),
    "ControllerExpandVolumeRequest": ("volume_id", "capacity_range"),
    "ControllerGetVolumeRequest": ("volume_id",),
    "ControllerGetVolumeHealthRequest": ("volume_id",),
    "ControllerModifyVolumeRequest": ("volume_id",),
    # GroupController
    "CreateVolumeGroupSnapshotRequest": ("name", "source_volume_ids"),
    "GetVolumeGroupSnapshotRequest": ("group_snapshot_id",),
    "DeleteVolumeGroupSnapshotRequest": ("group_snapshot_id",),
    # SnapshotMetadata
    "GetMetadataAllocatedRequest": ("snapshot_id",),
    "GetMetadataDeltaRequest": ("base_snapshot_id", "target_snapshot_id"),
    # Node
    "NodeStageVolumeRequest": ("volume_id", "staging_target_path", "volume_capability"),
    "NodeUnstageVolumeRequest": ("volume_id", "staging_target_path"),
    "NodePublishVolumeRequest": ("volume_id", "target_path", "volume_capability"),
    "NodeUnpublishVolumeRequest": ("volume_id", "target_path"),
    "NodeGetVolumeStatsRequest": ("volume_id", "volume_path"),
    "NodeGetVolumeHealthRequest": ("volume_id",),
    "NodeExpandVolumeRequest": ("volume_id", "volume_path"),
}


def check(request: Message) -> None:
    """Raise InvalidRequest naming the first REQUIRED field the request leaves out."""
    for name in REQUIRED.get(request.DESCRIPTOR.name, ()):
        field = request.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            if not getattr(request, name):
                raise InvalidRequest(f"{name} are required")
        elif field.message_type is not None:
            if not request.HasField(name):
                raise InvalidRequest(f"{name} is required")
        elif not getattr(request, name):
            raise InvalidRequest(f"{name} is required")
