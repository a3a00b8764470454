"""csi-sanity's Controller cases: ControllerExpandVolume and ControllerModifyVolume."""

from __future__ import annotations

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import expect_error_code
from tests.conformance.sanity_config import unique
from tests.conformance.sanity_steps import need_controller

C = grpc.StatusCode


# =============================================================================================
# ExpandVolume [Controller Server]
# =============================================================================================
def _need_expand(s: Sanity) -> None:
    need_controller(s, "EXPAND_VOLUME", "ControllerExpandVolume")


def test_expand_volume_should_fail_if_no_volume_id_is_given(sanity: Sanity) -> None:
    """ExpandVolume [Controller Server] / should fail if no volume id is given"""
    _need_expand(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerExpandVolume,
        sanity.expand_request(""),
    )


def test_expand_volume_should_fail_if_no_capacity_range_is_given(sanity: Sanity) -> None:
    """ExpandVolume [Controller Server] / should fail if no capacity range is given"""
    _need_expand(sanity)
    # As in csi-sanity, the volume ID is empty too.
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerExpandVolume,
        pb.ControllerExpandVolumeRequest(volume_id=""),
    )


def test_expand_volume_should_work(sanity: Sanity) -> None:
    """ExpandVolume [Controller Server] / should work"""
    _need_expand(sanity)
    vol = sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique("sanity-expand-volume"),
            volume_capabilities=[sanity.capability()],
            parameters=sanity.config.test_volume_parameters,
            capacity_range=pb.CapacityRange(required_bytes=sanity.config.test_volume_size),
        )
    )
    res = sanity.client.controller.ControllerExpandVolume(
        sanity.expand_request(vol.volume.volume_id)
    )
    assert res.capacity_bytes == sanity.config.expand_size()


# =============================================================================================
# ModifyVolume [Controller Server]
# =============================================================================================
def _need_modify(s: Sanity) -> None:
    need_controller(s, "MODIFY_VOLUME", "ControllerModifyVolume")


def _fake_modify(volume_id: str) -> pb.ControllerModifyVolumeRequest:
    return pb.ControllerModifyVolumeRequest(
        volume_id=volume_id, mutable_parameters={"XXX_FakeKey": "XXX_FakeValue"}
    )


def test_modify_volume_should_fail_if_no_volume_id_is_given(sanity: Sanity) -> None:
    """ModifyVolume [Controller Server] / should fail if no volume id is given"""
    _need_modify(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerModifyVolume,
        sanity.modify_request(""),
    )


def test_modify_volume_should_fail_if_volume_does_not_exist(sanity: Sanity) -> None:
    """ModifyVolume [Controller Server] / should fail if volume does not exist"""
    _need_modify(sanity)
    expect_error_code(
        C.NOT_FOUND,
        sanity.client.controller.ControllerModifyVolume,
        sanity.modify_request("non-existing-volume-id"),
    )


def test_modify_volume_should_fail_if_specified_mutable_parameters_are_not_supported_by_the_volume(
    sanity: Sanity,
) -> None:
    """ModifyVolume [Controller Server] / should fail if specified mutable parameters are not
    supported by the volume"""
    _need_modify(sanity)
    vol = sanity.must_create_volume(sanity.create_volume_request(unique("sanity-modify-volume")))
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerModifyVolume,
        _fake_modify(vol.volume.volume_id),
    )


def test_modify_volume_should_modify_a_volume_created_without_a_volume_attribute_class(
    sanity: Sanity,
) -> None:
    """ModifyVolume [Controller Server] / should modify a volume created without a volume
    attribute class"""
    _need_modify(sanity)
    vol = sanity.must_create_volume(sanity.create_volume_request(unique("sanity-modify-volume")))
    sanity.client.controller.ControllerModifyVolume(sanity.modify_request(vol.volume.volume_id))


def test_modify_volume_should_modify_a_volume_created_with_a_volume_attribute_class(
    sanity: Sanity,
) -> None:
    """ModifyVolume [Controller Server] / should modify a volume created with a volume attribute
    class"""
    _need_modify(sanity)
    request = sanity.create_volume_request(unique("sanity-modify-volume"))
    request.mutable_parameters.update(sanity.config.test_volume_mutable_parameters)
    vol = sanity.must_create_volume(request)
    sanity.client.controller.ControllerModifyVolume(sanity.modify_request(vol.volume.volume_id))


def test_modify_volume_should_fail_to_modify_a_volume_created_with_a_volume_attribute_class_if_new_mutable_parameters_are_not_supported_by_volume(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """ModifyVolume [Controller Server] / should fail to modify a volume created with a volume
    attribute class if new mutable parameters are not supported by volume"""
    _need_modify(sanity)
    request = sanity.create_volume_request(unique("sanity-modify-volume"))
    request.mutable_parameters.update(sanity.config.test_volume_mutable_parameters)
    vol = sanity.must_create_volume(request)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerModifyVolume,
        _fake_modify(vol.volume.volume_id),
    )
