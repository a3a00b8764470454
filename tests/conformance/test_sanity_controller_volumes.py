"""csi-sanity's Controller cases: CreateVolume, DeleteVolume, ValidateVolumeCapabilities."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import expect_error_code
from tests.conformance.sanity_config import (
    MAX_NAME_LENGTH,
    invalid_volume_id,
    unique,
    unique_with_length,
    valid_volume_id,
)
from tests.conformance.sanity_steps import need_controller

C = grpc.StatusCode

# =============================================================================================
# Controller Service [Controller Server]
# =============================================================================================


# ---- CreateVolume ----
def _need_create(s: Sanity) -> None:
    need_controller(s, "CREATE_DELETE_VOLUME", "CreateVolume")


def test_controller_create_volume_should_fail_when_no_name_is_provided(sanity: Sanity) -> None:
    """Controller Service [Controller Server] / CreateVolume / should fail when no name is
    provided"""
    _need_create(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.CreateVolume,
        pb.CreateVolumeRequest(parameters=sanity.config.test_volume_parameters),
    )


def test_controller_create_volume_should_fail_when_no_volume_capabilities_are_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should fail when no volume
    capabilities are provided"""
    _need_create(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.CreateVolume,
        pb.CreateVolumeRequest(
            name=unique("sanity-controller-create-no-volume-capabilities"),
            parameters=sanity.config.test_volume_parameters,
        ),
    )


def test_controller_create_volume_should_return_appropriate_values_single_node_writer_no_capacity(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should return appropriate values
    SingleNodeWriter NoCapacity"""
    _need_create(sanity)
    # Despite the name, csi-sanity asks for the test size as required bytes (no limit).
    sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique("sanity-controller-create-single-no-capacity"),
            volume_capabilities=[sanity.capability()],
            capacity_range=pb.CapacityRange(required_bytes=sanity.config.test_volume_size),
            parameters=sanity.config.test_volume_parameters,
        )
    )


def test_controller_create_volume_should_return_appropriate_values_single_node_writer_with_capacity_1gi(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should return appropriate values
    SingleNodeWriter WithCapacity 1Gi"""
    _need_create(sanity)
    size = sanity.config.test_volume_size
    try:
        vol = sanity.create_volume(
            pb.CreateVolumeRequest(
                name=unique("sanity-controller-create-single-with-capacity"),
                volume_capabilities=[sanity.capability()],
                capacity_range=pb.CapacityRange(required_bytes=size),
                parameters=sanity.config.test_volume_parameters,
            )
        )
    except grpc.RpcError as err:
        if err.code() in (C.OUT_OF_RANGE, C.UNIMPLEMENTED):
            pytest.skip(f"Required bytes not supported: {err.code().name}: {err.details()}")
        raise
    assert vol.volume.volume_id
    assert vol.volume.capacity_bytes == 0 or vol.volume.capacity_bytes >= size


def test_controller_create_volume_should_not_fail_when_requesting_same_name_and_same_capacity(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should not fail when requesting
    to create a volume with already existing name and same capacity"""
    _need_create(sanity)
    size = sanity.config.test_volume_size
    request = pb.CreateVolumeRequest(
        name=unique("sanity-controller-create-twice"),
        volume_capabilities=[sanity.capability()],
        capacity_range=pb.CapacityRange(required_bytes=size),
        parameters=sanity.config.test_volume_parameters,
    )
    vol1 = sanity.must_create_volume(request)
    assert vol1.volume.capacity_bytes == 0 or vol1.volume.capacity_bytes >= size
    vol2 = sanity.must_create_volume(request)
    assert vol2.volume.capacity_bytes == 0 or vol2.volume.capacity_bytes >= size
    assert vol1.volume.volume_id == vol2.volume.volume_id


def test_controller_create_volume_should_fail_when_requesting_same_name_and_different_capacity(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should fail when requesting to
    create a volume with already existing name and different capacity"""
    _need_create(sanity)
    name = unique("sanity-controller-create-twice-different")
    size1, size2 = sanity.config.test_volume_size, 2 * sanity.config.test_volume_size

    def request(size: int) -> pb.CreateVolumeRequest:
        return pb.CreateVolumeRequest(
            name=name,
            volume_capabilities=[sanity.capability()],
            capacity_range=pb.CapacityRange(required_bytes=size, limit_bytes=size),
            parameters=sanity.config.test_volume_parameters,
        )

    sanity.must_create_volume(request(size1))
    expect_error_code(C.ALREADY_EXISTS, sanity.create_volume, request(size2))


def test_controller_create_volume_should_not_fail_when_creating_volume_with_maximum_length_name(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should not fail when creating
    volume with maximum-length name"""
    _need_create(sanity)
    size = sanity.config.test_volume_size
    name = unique_with_length("sanity-controller-create-maxlen", MAX_NAME_LENGTH)
    assert len(name) == MAX_NAME_LENGTH
    vol = sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=name,
            volume_capabilities=[sanity.capability()],
            capacity_range=pb.CapacityRange(required_bytes=size),
            parameters=sanity.config.test_volume_parameters,
        )
    )
    assert vol.volume.capacity_bytes == 0 or vol.volume.capacity_bytes >= size


def test_controller_create_volume_should_create_volume_from_an_existing_source_snapshot(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should create volume from an
    existing source snapshot"""
    _need_create(sanity)
    need_controller(sanity, "CREATE_DELETE_SNAPSHOT", "Snapshot")
    vol1 = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-controller-source-vol"))
    )
    snap = sanity.wait_snapshot_ready(
        sanity.create_snapshot_request(
            unique("sanity-controller-snap-from-vol"), vol1.volume.volume_id
        )
    )
    request = sanity.create_volume_request(unique("sanity-controller-vol-from-snap"))
    request.volume_content_source.snapshot.snapshot_id = snap.snapshot.snapshot_id
    vol = sanity.create_volume(request)
    assert vol.volume.HasField("content_source"), "the new volume names no content source"


def test_controller_create_volume_should_fail_when_the_volume_source_snapshot_is_not_found(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should fail when the volume
    source snapshot is not found"""
    _need_create(sanity)
    need_controller(sanity, "CREATE_DELETE_SNAPSHOT", "Snapshot")
    request = sanity.create_volume_request(unique("sanity-controller-vol-from-snap"))
    request.volume_content_source.snapshot.snapshot_id = "non-existing-snapshot-id"
    expect_error_code(C.NOT_FOUND, sanity.create_volume, request)


def test_controller_create_volume_should_create_volume_from_an_existing_source_volume(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should create volume from an
    existing source volume"""
    _need_create(sanity)
    need_controller(sanity, "CLONE_VOLUME", "Volume Cloning")
    source = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-controller-source-vol"))
    )
    request = sanity.create_volume_request(unique("sanity-controller-vol-from-vol"))
    request.volume_content_source.volume.volume_id = source.volume.volume_id
    sanity.create_volume(request)


def test_controller_create_volume_should_fail_when_the_volume_source_volume_is_not_found(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should fail when the volume
    source volume is not found"""
    _need_create(sanity)
    need_controller(sanity, "CLONE_VOLUME", "Volume Cloning")
    request = sanity.create_volume_request(unique("sanity-controller-vol-from-snap"))
    request.volume_content_source.volume.volume_id = valid_volume_id()
    expect_error_code(C.NOT_FOUND, sanity.create_volume, request)


def test_controller_create_volume_should_create_volume_with_a_volume_attribute_class(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should create volume with a
    volume attribute class"""
    _need_create(sanity)
    need_controller(sanity, "MODIFY_VOLUME", "Modify volume")
    request = sanity.create_volume_request(unique("sanity-controller-vol-with-mutable-parameters"))
    request.mutable_parameters.update(sanity.config.test_volume_mutable_parameters)
    sanity.create_volume(request)


def test_controller_create_volume_should_not_create_volume_with_an_invalid_volume_attribute_class(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / CreateVolume / should not create volume with an
    invalid volume attribute class"""
    _need_create(sanity)
    need_controller(sanity, "MODIFY_VOLUME", "Modify Volume")
    request = sanity.create_volume_request(unique("sanity-controller-vol-with-mutable-parameters"))
    request.mutable_parameters["XXX_FakeKey"] = "XXX_FakeValue"
    expect_error_code(C.INVALID_ARGUMENT, sanity.create_volume, request)


# ---- DeleteVolume ----
def test_controller_delete_volume_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / DeleteVolume / should fail when no volume id is
    provided"""
    need_controller(sanity, "CREATE_DELETE_VOLUME", "DeleteVolume")
    expect_error_code(
        C.INVALID_ARGUMENT, sanity.client.controller.DeleteVolume, pb.DeleteVolumeRequest()
    )


def test_controller_delete_volume_should_succeed_when_an_invalid_volume_id_is_used(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / DeleteVolume / should succeed when an invalid
    volume id is used"""
    need_controller(sanity, "CREATE_DELETE_VOLUME", "DeleteVolume")
    sanity.client.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=invalid_volume_id()))


def test_controller_delete_volume_should_return_appropriate_values_no_optional_values_added(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / DeleteVolume / should return appropriate values
    (no optional values added)"""
    need_controller(sanity, "CREATE_DELETE_VOLUME", "DeleteVolume")
    vol = sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique("sanity-controller-create-appropriate"),
            volume_capabilities=[sanity.capability()],
            capacity_range=pb.CapacityRange(required_bytes=sanity.config.test_volume_size),
            parameters=sanity.config.test_volume_parameters,
        )
    )
    sanity.delete_volume(vol.volume.volume_id)


# ---- ValidateVolumeCapabilities (no capability gate in csi-sanity) ----
def _single_node_writer_volume(s: Sanity, prefix: str) -> pb.Volume:
    return s.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique(prefix),
            volume_capabilities=[s.capability()],
            capacity_range=pb.CapacityRange(required_bytes=s.config.test_volume_size),
            parameters=s.config.test_volume_parameters,
        )
    ).volume


def test_controller_validate_volume_capabilities_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ValidateVolumeCapabilities / should fail when no
    volume id is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ValidateVolumeCapabilities,
        pb.ValidateVolumeCapabilitiesRequest(),
    )


def test_controller_validate_volume_capabilities_should_fail_when_no_volume_capabilities_are_provided(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ValidateVolumeCapabilities / should fail when no
    volume capabilities are provided"""
    vol = _single_node_writer_volume(sanity, "sanity-controller-validate-nocaps")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ValidateVolumeCapabilities,
        pb.ValidateVolumeCapabilitiesRequest(volume_id=vol.volume_id),
    )


def test_controller_validate_volume_capabilities_should_return_appropriate_values_no_optional_values_added(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ValidateVolumeCapabilities / should return
    appropriate values (no optional values added)"""
    vol = _single_node_writer_volume(sanity, "sanity-controller-validate")
    res = sanity.client.controller.ValidateVolumeCapabilities(
        pb.ValidateVolumeCapabilitiesRequest(
            volume_id=vol.volume_id, volume_capabilities=[sanity.capability()]
        )
    )
    # A confirmation, when given, must list the capabilities it confirms.
    if res.HasField("confirmed"):
        assert len(res.confirmed.volume_capabilities) > 0


def test_controller_validate_volume_capabilities_should_fail_when_the_requested_volume_does_not_exist(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ValidateVolumeCapabilities / should fail when
    the requested volume does not exist"""
    expect_error_code(
        C.NOT_FOUND,
        sanity.client.controller.ValidateVolumeCapabilities,
        pb.ValidateVolumeCapabilitiesRequest(
            volume_id=valid_volume_id(), volume_capabilities=[sanity.capability()]
        ),
    )
