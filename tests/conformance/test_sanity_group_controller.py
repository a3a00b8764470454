"""csi-sanity's GroupController Service cases."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import expect_error_code
from tests.conformance.sanity_config import invalid_volume_id
from tests.conformance.sanity_steps import need_plugin_service

C = grpc.StatusCode


# =============================================================================================
# GroupController Service
# =============================================================================================
def _group(s: Sanity) -> pb_grpc.GroupControllerStub:
    need_plugin_service(s, "GROUP_CONTROLLER_SERVICE", "GroupControllerService")
    return pb_grpc.GroupControllerStub(s.client.channel)


def _need_group_snapshots(s: Sanity, stub: pb_grpc.GroupControllerStub) -> None:
    caps = stub.GroupControllerGetCapabilities(pb.GroupControllerGetCapabilitiesRequest())
    wanted = pb.GroupControllerServiceCapability.RPC.CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
    if not any(c.rpc.type == wanted for c in caps.capabilities):
        pytest.skip("VolumeGroupSnapshots not supported")


def test_group_controller_get_capabilities_should_return_appropriate_capabilities(
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController Server] / GroupControllerGetCapabilities /
    should return appropriate capabilities"""
    stub = _group(sanity)
    caps = stub.GroupControllerGetCapabilities(pb.GroupControllerGetCapabilitiesRequest())
    known = pb.GroupControllerServiceCapability.RPC.CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
    for cap in caps.capabilities:
        assert cap.rpc.type == known, f"Unknown capability: {cap.rpc.type}"


def test_group_controller_create_volume_group_snapshot_should_fail_when_no_name_is_provided(
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController VolumeGroupSnapshots] /
    CreateVolumeGroupSnapshot / should fail when no name is provided"""
    stub = _group(sanity)
    _need_group_snapshots(sanity, stub)
    expect_error_code(
        C.INVALID_ARGUMENT,
        stub.CreateVolumeGroupSnapshot,
        pb.CreateVolumeGroupSnapshotRequest(),
    )


def test_group_controller_get_volume_group_snapshot_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController VolumeGroupSnapshots] / GetVolumeGroupSnapshot /
    should fail when no volume id is provided"""
    stub = _group(sanity)
    _need_group_snapshots(sanity, stub)
    expect_error_code(
        C.INVALID_ARGUMENT, stub.GetVolumeGroupSnapshot, pb.GetVolumeGroupSnapshotRequest()
    )


def test_group_controller_get_volume_group_snapshot_should_fail_when_an_invalid_volume_id_is_used(
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController VolumeGroupSnapshots] / GetVolumeGroupSnapshot /
    should fail when an invalid volume id is used"""
    stub = _group(sanity)
    _need_group_snapshots(sanity, stub)
    expect_error_code(
        C.NOT_FOUND,
        stub.GetVolumeGroupSnapshot,
        pb.GetVolumeGroupSnapshotRequest(group_snapshot_id=invalid_volume_id()),
    )


def test_group_controller_delete_volume_group_snapshot_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController VolumeGroupSnapshots] /
    DeleteVolumeGroupSnapshot / should fail when no volume id is provided"""
    stub = _group(sanity)
    _need_group_snapshots(sanity, stub)
    expect_error_code(
        C.INVALID_ARGUMENT, stub.DeleteVolumeGroupSnapshot, pb.DeleteVolumeGroupSnapshotRequest()
    )


def test_group_controller_delete_volume_group_snapshot_should_succeed_when_an_invalid_volume_id_is_used(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """GroupController Service [GroupController VolumeGroupSnapshots] /
    DeleteVolumeGroupSnapshot / should succeed when an invalid volume id is used"""
    stub = _group(sanity)
    _need_group_snapshots(sanity, stub)
    stub.DeleteVolumeGroupSnapshot(
        pb.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=invalid_volume_id())
    )
