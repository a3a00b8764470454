"""proto/csi.proto's messages keep the CSI v1.13.0 set, field numbers, oneofs and map fields.

The v1.12 VolumeCondition fields keep their numbers: v1.13 reserved them."""

from __future__ import annotations

import pytest

from tests.unit.csi_descriptors import FILE, message, walk

# (message full name, field name, field number) as the v1.13.0 spec defines them (VolumeCondition:
# v1.12).
FIELD_NUMBERS: tuple[tuple[str, str, int], ...] = (
    ("csi.v1.CreateVolumeRequest", "name", 1),
    ("csi.v1.CreateVolumeRequest", "capacity_range", 2),
    ("csi.v1.CreateVolumeRequest", "volume_capabilities", 3),
    ("csi.v1.CreateVolumeRequest", "parameters", 4),
    ("csi.v1.CreateVolumeRequest", "secrets", 5),
    ("csi.v1.CreateVolumeRequest", "volume_content_source", 6),
    ("csi.v1.CreateVolumeRequest", "accessibility_requirements", 7),
    ("csi.v1.CreateVolumeRequest", "mutable_parameters", 8),
    ("csi.v1.NodeStageVolumeRequest", "volume_id", 1),
    ("csi.v1.NodeStageVolumeRequest", "publish_context", 2),
    ("csi.v1.NodeStageVolumeRequest", "staging_target_path", 3),
    ("csi.v1.NodeStageVolumeRequest", "volume_capability", 4),
    ("csi.v1.NodeStageVolumeRequest", "secrets", 5),
    ("csi.v1.NodeStageVolumeRequest", "volume_context", 6),
    ("csi.v1.ControllerPublishVolumeRequest", "volume_id", 1),
    ("csi.v1.ControllerPublishVolumeRequest", "node_id", 2),
    ("csi.v1.ControllerPublishVolumeRequest", "volume_capability", 3),
    ("csi.v1.ControllerPublishVolumeRequest", "readonly", 4),
    ("csi.v1.ControllerPublishVolumeRequest", "secrets", 5),
    ("csi.v1.ControllerPublishVolumeRequest", "volume_context", 6),
    ("csi.v1.NodePublishVolumeRequest", "volume_id", 1),
    ("csi.v1.NodePublishVolumeRequest", "publish_context", 2),
    ("csi.v1.NodePublishVolumeRequest", "staging_target_path", 3),
    ("csi.v1.NodePublishVolumeRequest", "target_path", 4),
    ("csi.v1.NodePublishVolumeRequest", "volume_capability", 5),
    ("csi.v1.NodePublishVolumeRequest", "readonly", 6),
    ("csi.v1.NodePublishVolumeRequest", "secrets", 7),
    ("csi.v1.NodePublishVolumeRequest", "volume_context", 8),
    ("csi.v1.VolumeCapability", "block", 1),
    ("csi.v1.VolumeCapability", "mount", 2),
    ("csi.v1.VolumeCapability", "access_mode", 3),
    ("csi.v1.VolumeCapability.MountVolume", "volume_mount_group", 3),
    ("csi.v1.Volume", "capacity_bytes", 1),
    ("csi.v1.Volume", "volume_id", 2),
    ("csi.v1.Volume", "accessible_topology", 5),
    ("csi.v1.Snapshot", "creation_time", 4),
    ("csi.v1.Snapshot", "group_snapshot_id", 6),
    ("csi.v1.ControllerModifyVolumeRequest", "mutable_parameters", 3),
    ("csi.v1.GetSnapshotRequest", "secrets", 2),
    ("csi.v1.NodeGetInfoResponse", "max_volumes_per_node", 2),
    ("csi.v1.NodeExpandVolumeRequest", "secrets", 6),
    ("csi.v1.GetMetadataDeltaRequest", "target_snapshot_id", 2),
    ("csi.v1.GetMetadataDeltaRequest", "secrets", 5),
    ("csi.v1.GetMetadataAllocatedResponse", "block_metadata", 3),
    ("csi.v1.CreateSnapshotRequest", "accessibility_requirements", 5),
    ("csi.v1.Snapshot", "accessible_topology", 7),
    ("csi.v1.NodeGetVolumeStatsResponse", "volume_condition", 2),
    ("csi.v1.ListVolumesResponse.VolumeStatus", "volume_condition", 2),
    ("csi.v1.ControllerGetVolumeResponse.VolumeStatus", "volume_condition", 2),
    ("csi.v1.VolumeHealth", "volume_id", 1),
    ("csi.v1.VolumeHealth", "health_statuses", 2),
    ("csi.v1.VolumeHealth.VolumeHealthEntry", "status", 1),
    ("csi.v1.VolumeHealth.VolumeHealthEntry", "reason", 2),
    ("csi.v1.VolumeHealth.VolumeHealthEntry", "message", 3),
    ("csi.v1.NodeGetVolumeHealthRequest", "volume_publish_path", 2),
    ("csi.v1.NodeGetVolumeHealthRequest", "staging_target_path", 3),
    ("csi.v1.NodeGetStorageHealthResponse.StorageBackendHealth", "volume_capability", 4),
    ("csi.v1.ControllerListVolumeHealthRequest", "secrets", 3),
)

# Every message (nested ones included, map entries excluded) in the v1.13.0 spec, and the v1.12
# VolumeCondition.
SPEC_MESSAGES: tuple[str, ...] = (
    "csi.v1.GetPluginInfoRequest",
    "csi.v1.GetPluginInfoResponse",
    "csi.v1.GetPluginCapabilitiesRequest",
    "csi.v1.GetPluginCapabilitiesResponse",
    "csi.v1.PluginCapability",
    "csi.v1.PluginCapability.Service",
    "csi.v1.PluginCapability.VolumeExpansion",
    "csi.v1.ProbeRequest",
    "csi.v1.ProbeResponse",
    "csi.v1.CreateVolumeRequest",
    "csi.v1.VolumeContentSource",
    "csi.v1.VolumeContentSource.SnapshotSource",
    "csi.v1.VolumeContentSource.VolumeSource",
    "csi.v1.CreateVolumeResponse",
    "csi.v1.VolumeCapability",
    "csi.v1.VolumeCapability.BlockVolume",
    "csi.v1.VolumeCapability.MountVolume",
    "csi.v1.VolumeCapability.AccessMode",
    "csi.v1.CapacityRange",
    "csi.v1.Volume",
    "csi.v1.TopologyRequirement",
    "csi.v1.Topology",
    "csi.v1.DeleteVolumeRequest",
    "csi.v1.DeleteVolumeResponse",
    "csi.v1.ControllerPublishVolumeRequest",
    "csi.v1.ControllerPublishVolumeResponse",
    "csi.v1.ControllerUnpublishVolumeRequest",
    "csi.v1.ControllerUnpublishVolumeResponse",
    "csi.v1.ValidateVolumeCapabilitiesRequest",
    "csi.v1.ValidateVolumeCapabilitiesResponse",
    "csi.v1.ValidateVolumeCapabilitiesResponse.Confirmed",
    "csi.v1.ListVolumesRequest",
    "csi.v1.ListVolumesResponse",
    "csi.v1.ListVolumesResponse.VolumeStatus",
    "csi.v1.ListVolumesResponse.Entry",
    "csi.v1.ControllerListVolumeHealthRequest",
    "csi.v1.ControllerListVolumeHealthResponse",
    "csi.v1.VolumeHealth",
    "csi.v1.VolumeHealth.VolumeHealthEntry",
    "csi.v1.ControllerGetVolumeHealthRequest",
    "csi.v1.ControllerGetVolumeHealthResponse",
    "csi.v1.ControllerGetVolumeRequest",
    "csi.v1.ControllerGetVolumeResponse",
    "csi.v1.ControllerGetVolumeResponse.VolumeStatus",
    "csi.v1.ControllerModifyVolumeRequest",
    "csi.v1.ControllerModifyVolumeResponse",
    "csi.v1.GetCapacityRequest",
    "csi.v1.GetCapacityResponse",
    "csi.v1.ControllerGetCapabilitiesRequest",
    "csi.v1.ControllerGetCapabilitiesResponse",
    "csi.v1.ControllerServiceCapability",
    "csi.v1.ControllerServiceCapability.RPC",
    "csi.v1.CreateSnapshotRequest",
    "csi.v1.CreateSnapshotResponse",
    "csi.v1.Snapshot",
    "csi.v1.DeleteSnapshotRequest",
    "csi.v1.DeleteSnapshotResponse",
    "csi.v1.ListSnapshotsRequest",
    "csi.v1.ListSnapshotsResponse",
    "csi.v1.ListSnapshotsResponse.Entry",
    "csi.v1.GetSnapshotRequest",
    "csi.v1.GetSnapshotResponse",
    "csi.v1.ControllerExpandVolumeRequest",
    "csi.v1.ControllerExpandVolumeResponse",
    "csi.v1.NodeStageVolumeRequest",
    "csi.v1.NodeStageVolumeResponse",
    "csi.v1.NodeUnstageVolumeRequest",
    "csi.v1.NodeUnstageVolumeResponse",
    "csi.v1.NodePublishVolumeRequest",
    "csi.v1.NodePublishVolumeResponse",
    "csi.v1.NodeUnpublishVolumeRequest",
    "csi.v1.NodeUnpublishVolumeResponse",
    "csi.v1.NodeGetVolumeStatsRequest",
    "csi.v1.NodeGetVolumeStatsResponse",
    "csi.v1.VolumeUsage",
    "csi.v1.VolumeCondition",
    "csi.v1.NodeGetVolumeHealthRequest",
    "csi.v1.NodeGetVolumeHealthResponse",
    "csi.v1.NodeGetStorageHealthRequest",
    "csi.v1.NodeGetStorageHealthResponse",
    "csi.v1.NodeGetStorageHealthResponse.StorageBackendHealth",
    "csi.v1.NodeGetCapabilitiesRequest",
    "csi.v1.NodeGetCapabilitiesResponse",
    "csi.v1.NodeServiceCapability",
    "csi.v1.NodeServiceCapability.RPC",
    "csi.v1.NodeGetInfoRequest",
    "csi.v1.NodeGetInfoResponse",
    "csi.v1.NodeExpandVolumeRequest",
    "csi.v1.NodeExpandVolumeResponse",
    "csi.v1.GroupControllerGetCapabilitiesRequest",
    "csi.v1.GroupControllerGetCapabilitiesResponse",
    "csi.v1.GroupControllerServiceCapability",
    "csi.v1.GroupControllerServiceCapability.RPC",
    "csi.v1.CreateVolumeGroupSnapshotRequest",
    "csi.v1.CreateVolumeGroupSnapshotResponse",
    "csi.v1.VolumeGroupSnapshot",
    "csi.v1.DeleteVolumeGroupSnapshotRequest",
    "csi.v1.DeleteVolumeGroupSnapshotResponse",
    "csi.v1.GetVolumeGroupSnapshotRequest",
    "csi.v1.GetVolumeGroupSnapshotResponse",
    "csi.v1.BlockMetadata",
    "csi.v1.GetMetadataAllocatedRequest",
    "csi.v1.GetMetadataAllocatedResponse",
    "csi.v1.GetMetadataDeltaRequest",
    "csi.v1.GetMetadataDeltaResponse",
)


def _our_messages() -> set[str]:
    return {
        m.full_name
        for m in walk(FILE.message_types_by_name.values())
        if not m.GetOptions().map_entry
    }


@pytest.mark.parametrize(("message_name", "field_name", "number"), FIELD_NUMBERS)
def test_field_number(message_name: str, field_name: str, number: int) -> None:
    assert message(message_name).fields_by_name[field_name].number == number


def test_every_spec_message_is_present() -> None:
    ours = _our_messages()
    missing = [name for name in SPEC_MESSAGES if name not in ours]
    assert missing == []
    assert ours == set(SPEC_MESSAGES)


def test_oneofs() -> None:
    oneofs = {
        ("csi.v1.PluginCapability", "type"): ["service", "volume_expansion"],
        ("csi.v1.VolumeContentSource", "type"): ["snapshot", "volume"],
        ("csi.v1.VolumeCapability", "access_type"): ["block", "mount"],
        ("csi.v1.ControllerServiceCapability", "type"): ["rpc"],
        ("csi.v1.NodeServiceCapability", "type"): ["rpc"],
        ("csi.v1.GroupControllerServiceCapability", "type"): ["rpc"],
    }
    for (message_name, oneof_name), fields in oneofs.items():
        oneof = message(message_name).oneofs_by_name[oneof_name]
        assert [f.name for f in oneof.fields] == fields


def test_map_fields() -> None:
    for message_name, field_name in (
        ("csi.v1.CreateVolumeRequest", "parameters"),
        ("csi.v1.CreateVolumeRequest", "mutable_parameters"),
        ("csi.v1.NodeStageVolumeRequest", "publish_context"),
        ("csi.v1.Volume", "volume_context"),
        ("csi.v1.Topology", "segments"),
    ):
        field = message(message_name).fields_by_name[field_name]
        assert field.message_type is not None
        assert field.message_type.GetOptions().map_entry
