"""proto/csi.proto and its stubs keep the CSI v1.13.0 wire contract.

The v1.12 VolumeCondition fields and capabilities keep their numbers: v1.13 reserved them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, EnumDescriptor

from csi_hostpath._pb import csi_pb2, csi_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
PB_DIR = ROOT / "csi_hostpath" / "_pb"
GENERATED_FILES = tuple(
    f"{proto}{suffix}"
    for proto in ("csi", "pluginregistration")
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
)

FILE = csi_pb2.DESCRIPTOR

SERVICES: dict[str, tuple[str, ...]] = {
    "csi.v1.Identity": ("GetPluginInfo", "GetPluginCapabilities", "Probe"),
    "csi.v1.Controller": (
        "CreateVolume",
        "DeleteVolume",
        "ControllerPublishVolume",
        "ControllerUnpublishVolume",
        "ValidateVolumeCapabilities",
        "ListVolumes",
        "ControllerListVolumeHealth",
        "ControllerGetVolumeHealth",
        "GetCapacity",
        "ControllerGetCapabilities",
        "CreateSnapshot",
        "DeleteSnapshot",
        "ListSnapshots",
        "GetSnapshot",
        "ControllerExpandVolume",
        "ControllerGetVolume",
        "ControllerModifyVolume",
    ),
    "csi.v1.GroupController": (
        "GroupControllerGetCapabilities",
        "CreateVolumeGroupSnapshot",
        "DeleteVolumeGroupSnapshot",
        "GetVolumeGroupSnapshot",
    ),
    "csi.v1.SnapshotMetadata": ("GetMetadataAllocated", "GetMetadataDelta"),
    "csi.v1.Node": (
        "NodeStageVolume",
        "NodeUnstageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeGetVolumeStats",
        "NodeGetVolumeHealth",
        "NodeGetStorageHealth",
        "NodeExpandVolume",
        "NodeGetCapabilities",
        "NodeGetInfo",
    ),
}

SERVER_STREAMING = {
    ("csi.v1.SnapshotMetadata", "GetMetadataAllocated"),
    ("csi.v1.SnapshotMetadata", "GetMetadataDelta"),
}

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

# Every enum in the spec file, with its complete value table.
ENUMS: dict[str, dict[str, int]] = {
    "csi.v1.BlockMetadataType": {"UNKNOWN": 0, "FIXED_LENGTH": 1, "VARIABLE_LENGTH": 2},
    "csi.v1.VolumeHealthErrorType": {
        "UNKNOWN_VOLUME_HEALTH_TYPE": 0,
        "DEGRADED": 1,
        "INACCESSIBLE": 2,
        "DATA_LOSS": 3,
    },
    "csi.v1.StorageHealthErrorType": {
        "UNKNOWN_STORAGE_HEALTH_ERROR_TYPE": 0,
        "STORAGE_DEGRADED": 1,
        "STORAGE_UNREACHABLE": 2,
    },
    "csi.v1.PluginCapability.Service.Type": {
        "UNKNOWN": 0,
        "CONTROLLER_SERVICE": 1,
        "VOLUME_ACCESSIBILITY_CONSTRAINTS": 2,
        "GROUP_CONTROLLER_SERVICE": 3,
        "SNAPSHOT_METADATA_SERVICE": 4,
        "SNAPSHOT_ACCESSIBILITY_CONSTRAINTS": 5,
    },
    "csi.v1.PluginCapability.VolumeExpansion.Type": {"UNKNOWN": 0, "ONLINE": 1, "OFFLINE": 2},
    "csi.v1.VolumeCapability.AccessMode.Mode": {
        "UNKNOWN": 0,
        "SINGLE_NODE_WRITER": 1,
        "SINGLE_NODE_READER_ONLY": 2,
        "MULTI_NODE_READER_ONLY": 3,
        "MULTI_NODE_SINGLE_WRITER": 4,
        "MULTI_NODE_MULTI_WRITER": 5,
        "SINGLE_NODE_SINGLE_WRITER": 6,
        "SINGLE_NODE_MULTI_WRITER": 7,
    },
    "csi.v1.ControllerServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "CREATE_DELETE_VOLUME": 1,
        "PUBLISH_UNPUBLISH_VOLUME": 2,
        "LIST_VOLUMES": 3,
        "GET_CAPACITY": 4,
        "CREATE_DELETE_SNAPSHOT": 5,
        "LIST_SNAPSHOTS": 6,
        "CLONE_VOLUME": 7,
        "PUBLISH_READONLY": 8,
        "EXPAND_VOLUME": 9,
        "LIST_VOLUMES_PUBLISHED_NODES": 10,
        "VOLUME_CONDITION": 11,
        "GET_VOLUME": 12,
        "SINGLE_NODE_MULTI_WRITER": 13,
        "MODIFY_VOLUME": 14,
        "GET_SNAPSHOT": 15,
        "GET_VOLUME_HEALTH": 16,
        "LIST_VOLUME_HEALTH": 17,
    },
    "csi.v1.VolumeUsage.Unit": {"UNKNOWN": 0, "BYTES": 1, "INODES": 2},
    "csi.v1.NodeServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "STAGE_UNSTAGE_VOLUME": 1,
        "GET_VOLUME_STATS": 2,
        "EXPAND_VOLUME": 3,
        "VOLUME_CONDITION": 4,
        "SINGLE_NODE_MULTI_WRITER": 5,
        "VOLUME_MOUNT_GROUP": 6,
        "GET_VOLUME_HEALTH": 7,
        "GET_STORAGE_HEALTH": 8,
    },
    "csi.v1.GroupControllerServiceCapability.RPC.Type": {
        "UNKNOWN": 0,
        "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT": 1,
    },
}

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


def _walk(messages: Iterable[Descriptor]) -> Iterator[Descriptor]:
    for message in messages:
        yield message
        yield from _walk(message.nested_types)


def _our_messages() -> set[str]:
    return {
        m.full_name
        for m in _walk(FILE.message_types_by_name.values())
        if not m.GetOptions().map_entry
    }


def _our_enums() -> dict[str, EnumDescriptor]:
    enums = {e.full_name: e for e in FILE.enum_types_by_name.values()}
    for message in _walk(FILE.message_types_by_name.values()):
        enums.update({e.full_name: e for e in message.enum_types})
    return enums


def _message(full_name: str) -> Descriptor:
    return FILE.pool.FindMessageTypeByName(full_name)


def test_file_identity() -> None:
    assert FILE.name == "csi.proto"
    assert FILE.package == "csi.v1"
    assert [d.name for d in FILE.dependencies] == [
        "google/protobuf/descriptor.proto",
        "google/protobuf/timestamp.proto",
        "google/protobuf/wrappers.proto",
    ]


def test_service_set_is_exact() -> None:
    assert {s.full_name for s in FILE.services_by_name.values()} == set(SERVICES)


@pytest.mark.parametrize("service_name", sorted(SERVICES))
def test_service_methods(service_name: str) -> None:
    service = FILE.pool.FindServiceByName(service_name)
    assert service.full_name == service_name
    assert tuple(m.name for m in service.methods) == SERVICES[service_name]
    for method in service.methods:
        assert not method.client_streaming
        streams = (service_name, method.name) in SERVER_STREAMING
        assert method.server_streaming is streams, method.full_name


@pytest.mark.parametrize("service_name", sorted(SERVICES))
def test_grpc_module_has_service_classes(service_name: str) -> None:
    short = service_name.rsplit(".", 1)[1]
    assert hasattr(csi_pb2_grpc, f"{short}Stub")
    assert hasattr(csi_pb2_grpc, f"{short}Servicer")
    assert hasattr(csi_pb2_grpc, f"add_{short}Servicer_to_server")


@pytest.mark.parametrize(("message_name", "field_name", "number"), FIELD_NUMBERS)
def test_field_number(message_name: str, field_name: str, number: int) -> None:
    assert _message(message_name).fields_by_name[field_name].number == number


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_enum_values(enum_name: str) -> None:
    enum = _our_enums()[enum_name]
    assert {v.name: v.number for v in enum.values} == ENUMS[enum_name]


def test_enum_set_is_exact() -> None:
    assert set(_our_enums()) == set(ENUMS)


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
        oneof = _message(message_name).oneofs_by_name[oneof_name]
        assert [f.name for f in oneof.fields] == fields


def test_map_fields() -> None:
    for message_name, field_name in (
        ("csi.v1.CreateVolumeRequest", "parameters"),
        ("csi.v1.CreateVolumeRequest", "mutable_parameters"),
        ("csi.v1.NodeStageVolumeRequest", "publish_context"),
        ("csi.v1.Volume", "volume_context"),
        ("csi.v1.Topology", "segments"),
    ):
        field = _message(message_name).fields_by_name[field_name]
        assert field.message_type is not None
        assert field.message_type.GetOptions().map_entry


def test_custom_options() -> None:
    extensions = {
        "alpha_enum": ("google.protobuf.EnumOptions", 1060),
        "alpha_enum_value": ("google.protobuf.EnumValueOptions", 1060),
        "csi_secret": ("google.protobuf.FieldOptions", 1059),
        "alpha_field": ("google.protobuf.FieldOptions", 1060),
        "alpha_message": ("google.protobuf.MessageOptions", 1060),
        "alpha_method": ("google.protobuf.MethodOptions", 1060),
        "alpha_service": ("google.protobuf.ServiceOptions", 1060),
    }
    assert set(FILE.extensions_by_name) == set(extensions)
    for name, (extendee, number) in extensions.items():
        ext = FILE.extensions_by_name[name]
        assert ext.number == number
        assert ext.containing_type is not None
        assert ext.containing_type.full_name == extendee

    secrets = _message("csi.v1.CreateVolumeRequest").fields_by_name["secrets"]
    assert secrets.GetOptions().Extensions[csi_pb2.csi_secret] is True
    get_snapshot = FILE.services_by_name["Controller"].methods_by_name["GetSnapshot"]
    assert get_snapshot.GetOptions().Extensions[csi_pb2.alpha_method] is True
    snapshot_metadata = FILE.services_by_name["SnapshotMetadata"]
    assert snapshot_metadata.GetOptions().Extensions[csi_pb2.alpha_service] is True


def test_round_trip() -> None:
    request = csi_pb2.CreateVolumeRequest(
        name="pvc-1",
        capacity_range=csi_pb2.CapacityRange(required_bytes=1 << 20),
        parameters={"k": "v"},
    )
    decoded = csi_pb2.CreateVolumeRequest.FromString(request.SerializeToString())
    assert decoded == request


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpc_tools is not installed")
    env = dict(os.environ)
    env["PYTHON"] = sys.executable
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    subprocess.run(
        ["bash", str(ROOT / "tools" / "genproto.sh"), str(tmp_path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GENERATED_FILES)
    for name in GENERATED_FILES:
        assert (tmp_path / name).read_bytes() == (PB_DIR / name).read_bytes(), name
