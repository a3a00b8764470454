"""proto/csi.proto's services keep the CSI v1.13.0 methods, in order, and the stubs serve them."""

from __future__ import annotations

import pytest

from csi_hostpath._pb import csi_pb2_grpc
from tests.unit.csi_descriptors import FILE

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
