"""csi-sanity's Controller cases: ControllerPublish/UnpublishVolume, the volume lifecycle."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.conftest import StartSanity
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import expect_error_code
from tests.conformance.sanity_config import SanityConfig, unique, valid_node_id, valid_volume_id
from tests.conformance.sanity_steps import need_controller, topology_requirement

C = grpc.StatusCode

# =============================================================================================
# Controller Service [Controller Server]
# =============================================================================================


# ---- ControllerPublishVolume ----
def _need_publish(s: Sanity) -> None:
    need_controller(s, "PUBLISH_UNPUBLISH_VOLUME", "ControllerPublishVolume")


def test_controller_publish_volume_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when no
    volume id is provided"""
    _need_publish(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerPublishVolume,
        pb.ControllerPublishVolumeRequest(),
    )


def test_controller_publish_volume_should_fail_when_no_node_id_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when no
    node id is provided"""
    _need_publish(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerPublishVolume,
        pb.ControllerPublishVolumeRequest(volume_id=valid_volume_id()),
    )


def test_controller_publish_volume_should_fail_when_no_volume_capability_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when no
    volume capability is provided"""
    _need_publish(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerPublishVolume,
        pb.ControllerPublishVolumeRequest(volume_id=valid_volume_id(), node_id=valid_node_id()),
    )


def test_controller_publish_volume_should_fail_when_publishing_more_volumes_than_the_node_max_attach_limit(  # noqa: E501 - the case's own name
    start_sanity: StartSanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when
    publishing more volumes than the node max attach limit

    csi-sanity runs this only with --csi.testnodevolumeattachlimit and a driver that reports a
    limit; here the driver is started with --max-volumes-per-node 2 and the flag is on."""
    sanity = start_sanity(
        "--max-volumes-per-node", "2", config=SanityConfig(test_node_volume_attach_limit=True)
    )
    _need_publish(sanity)
    if not sanity.config.test_node_volume_attach_limit:
        pytest.skip("testnodevolumeattachlimit not enabled")
    info = sanity.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
    if info.max_volumes_per_node <= 0:
        pytest.skip("No MaxVolumesPerNode")
    assert info.node_id
    for i in range(info.max_volumes_per_node):
        vol = sanity.must_create_volume(
            sanity.create_volume_request(unique(f"sanity-max-attach-limit-vol-{i}"))
        )
        sanity.controller_publish(
            sanity.controller_publish_request(vol.volume.volume_id, info.node_id)
        )
    extra = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-max-attach-limit-vol+1"))
    )
    with pytest.raises(grpc.RpcError):
        sanity.controller_publish(
            sanity.controller_publish_request(extra.volume.volume_id, info.node_id)
        )


def test_controller_publish_volume_should_fail_when_the_volume_does_not_exist(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when the
    volume does not exist"""
    _need_publish(sanity)
    expect_error_code(
        C.NOT_FOUND,
        sanity.controller_publish,
        sanity.controller_publish_request(valid_volume_id(), valid_node_id()),
    )


def test_controller_publish_volume_should_fail_when_the_node_does_not_exist(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when the
    node does not exist"""
    _need_publish(sanity)
    vol = sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique("sanity-controller-wrong-node"),
            volume_capabilities=[sanity.capability()],
            parameters=sanity.config.test_volume_parameters,
        )
    )
    expect_error_code(
        C.NOT_FOUND,
        sanity.controller_publish,
        sanity.controller_publish_request(vol.volume.volume_id, valid_node_id()),
    )


def test_controller_publish_volume_should_fail_when_the_volume_is_already_published_but_is_incompatible(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerPublishVolume / should fail when the
    volume is already published but is incompatible"""
    _need_publish(sanity)
    need_controller(sanity, "PUBLISH_READONLY", "ControllerPublishVolume.readonly field")
    vol = sanity.must_create_volume(
        pb.CreateVolumeRequest(
            name=unique("sanity-controller-published-incompatible"),
            volume_capabilities=[sanity.capability()],
            parameters=sanity.config.test_volume_parameters,
        )
    )
    request = sanity.controller_publish_request(vol.volume.volume_id, sanity.node_id())
    sanity.controller_publish(request)
    request.readonly = True
    expect_error_code(C.ALREADY_EXISTS, sanity.controller_publish, request)


# ---- volume lifecycle ----
def _volume_lifecycle(s: Sanity, count: int) -> None:
    """csi-sanity's VolumeLifecycle: create on this node's topology, ControllerPublish `count`
    times; the cleanup then unpublishes and deletes."""
    node_id = s.node_id()
    request = pb.CreateVolumeRequest(
        name=unique(f"sanity-controller-publish-{count}"),
        volume_capabilities=[s.capability()],
        parameters=s.config.test_volume_parameters,
    )
    requirement = topology_requirement(s)
    if requirement is not None:
        request.accessibility_requirements.CopyFrom(requirement)
    vol = s.must_create_volume(request).volume
    for _ in range(count):
        publish = s.controller_publish_request(vol.volume_id, node_id)
        publish.volume_context.update(vol.volume_context)
        s.controller_publish(publish)


def test_controller_volume_lifecycle_should_work(sanity: Sanity) -> None:
    """Controller Service [Controller Server] / volume lifecycle / should work"""
    need_controller(sanity, "PUBLISH_UNPUBLISH_VOLUME", "Controller Publish, UnpublishVolume")
    _volume_lifecycle(sanity, 1)


def test_controller_volume_lifecycle_should_be_idempotent(sanity: Sanity) -> None:
    """Controller Service [Controller Server] / volume lifecycle / should be idempotent"""
    need_controller(sanity, "PUBLISH_UNPUBLISH_VOLUME", "Controller Publish, UnpublishVolume")
    _volume_lifecycle(sanity, sanity.config.idempotent_count)


def test_controller_unpublish_volume_should_fail_when_no_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """Controller Service [Controller Server] / ControllerUnpublishVolume / should fail when no
    volume id is provided"""
    need_controller(sanity, "PUBLISH_UNPUBLISH_VOLUME", "ControllerUnpublishVolume")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.controller.ControllerUnpublishVolume,
        pb.ControllerUnpublishVolumeRequest(),
    )
