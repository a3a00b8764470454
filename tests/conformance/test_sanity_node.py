"""csi-sanity's Node Service cases: capabilities, info, publish, stage and the round trip."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Mode, Sanity
from tests.conformance.sanity_checks import expect_error_code, node_cap, path_exists, plugin_service
from tests.conformance.sanity_config import unique, valid_volume_id
from tests.conformance.sanity_steps import (
    NodeRPCType,
    need_node,
    need_plugin_service,
    staged_and_published,
    topology_requirement,
)

C = grpc.StatusCode

# =============================================================================================
# Node Service
# =============================================================================================
# The node capabilities csi-sanity knows (4, VOLUME_CONDITION, is accepted under either name).
KNOWN_NODE_CAPS = {
    "UNKNOWN",
    "STAGE_UNSTAGE_VOLUME",
    "GET_VOLUME_STATS",
    "EXPAND_VOLUME",
    "VOLUME_CONDITION",
    "SINGLE_NODE_MULTI_WRITER",
    "VOLUME_MOUNT_GROUP",
    "GET_VOLUME_HEALTH",
    "GET_STORAGE_HEALTH",
}


def test_node_get_capabilities_should_return_appropriate_capabilities(sanity: Sanity) -> None:
    """Node Service / NodeGetCapabilities / should return appropriate capabilities"""
    caps = sanity.client.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
    for cap in caps.capabilities:
        assert cap.HasField("rpc")
        name = NodeRPCType.Name(cap.rpc.type)
        assert name in KNOWN_NODE_CAPS, f"Unknown capability: {name}"


def test_node_get_info_should_return_appropriate_values(sanity: Sanity) -> None:
    """Node Service / NodeGetInfo / should return appropriate values"""
    info = sanity.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
    assert info.node_id
    assert info.max_volumes_per_node >= 0
    if plugin_service(sanity.client, "VOLUME_ACCESSIBILITY_CONSTRAINTS"):
        assert info.HasField("accessible_topology")


# ---- NodePublishVolume ----
def test_node_publish_volume_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodePublishVolume / should fail when no volume id is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT, sanity.client.node.NodePublishVolume, pb.NodePublishVolumeRequest()
    )


def test_node_publish_volume_should_fail_when_no_target_path_is_provided(sanity: Sanity) -> None:
    """Node Service / NodePublishVolume / should fail when no target path is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodePublishVolume,
        pb.NodePublishVolumeRequest(volume_id=valid_volume_id()),
    )


def test_node_publish_volume_should_fail_when_no_volume_capability_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodePublishVolume / should fail when no volume capability is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodePublishVolume,
        pb.NodePublishVolumeRequest(volume_id=valid_volume_id(), target_path=sanity.target),
    )


def test_node_publish_volume_with_single_node_multi_writer_capability_should_fail_when_volume_with_single_node_single_writer_access_mode_is_already_mounted_at_a_different_target_path(  # noqa: E501 - the case's own name
    sanity: Sanity,
) -> None:
    """Node Service / NodePublishVolume / with single node multi writer capability / should fail
    when volume with single node single writer access mode is already mounted at a different
    target path"""
    need_node(sanity, "SINGLE_NODE_MULTI_WRITER", "single node multi writer capability")
    cap = sanity.capability(Mode.SINGLE_NODE_SINGLE_WRITER)
    vol, publish_context = staged_and_published(
        sanity, "sanity-node-publish-single-node-single-writer", cap
    )
    other = pb.NodePublishVolumeRequest(
        volume_id=vol.volume_id,
        target_path=str(sanity.target_path / "other_target"),
        volume_capability=cap,
        volume_context=vol.volume_context,
        publish_context=publish_context,
    )
    if node_cap(sanity.client, "STAGE_UNSTAGE_VOLUME"):
        other.staging_target_path = sanity.staging
    expect_error_code(C.FAILED_PRECONDITION, sanity.client.node.NodePublishVolume, other)


# ---- NodeUnpublishVolume ----
def test_node_unpublish_volume_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeUnpublishVolume / should fail when no volume id is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeUnpublishVolume,
        pb.NodeUnpublishVolumeRequest(),
    )


def test_node_unpublish_volume_should_fail_when_no_target_path_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodeUnpublishVolume / should fail when no target path is provided"""
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeUnpublishVolume,
        pb.NodeUnpublishVolumeRequest(volume_id=valid_volume_id()),
    )


def test_node_unpublish_volume_should_remove_target_path(sanity: Sanity) -> None:
    """Node Service / NodeUnpublishVolume / should remove target path"""
    vol, _ = staged_and_published(sanity, "sanity-node-unpublish-volume")
    assert path_exists(sanity.target), f"{sanity.target} should have been created by the CSI driver"
    sanity.client.node.NodeUnpublishVolume(
        pb.NodeUnpublishVolumeRequest(volume_id=vol.volume_id, target_path=sanity.target)
    )
    # The spec: the SP MUST delete the file or directory it created at the target path.
    assert not path_exists(sanity.target), (
        f"{sanity.target} should have been removed by NodeUnpublishVolume"
    )


# ---- NodeStageVolume ----
# csi-sanity passes a dummy publish_context on these error cases; they must fail on the request.
DUMMY_PUBLISH_CONTEXT = {"device": "/dev/mock"}


def test_node_stage_volume_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeStageVolume / should fail when no volume id is provided"""
    need_node(sanity, "STAGE_UNSTAGE_VOLUME", "NodeStageVolume")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeStageVolume,
        pb.NodeStageVolumeRequest(
            staging_target_path=sanity.staging,
            volume_capability=sanity.capability(),
            publish_context=DUMMY_PUBLISH_CONTEXT,
        ),
    )


def test_node_stage_volume_should_fail_when_no_staging_target_path_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodeStageVolume / should fail when no staging target path is provided"""
    need_node(sanity, "STAGE_UNSTAGE_VOLUME", "NodeStageVolume")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeStageVolume,
        pb.NodeStageVolumeRequest(
            volume_id=valid_volume_id(),
            volume_capability=sanity.capability(),
            publish_context=DUMMY_PUBLISH_CONTEXT,
        ),
    )


def test_node_stage_volume_should_fail_when_no_volume_capability_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodeStageVolume / should fail when no volume capability is provided"""
    need_node(sanity, "STAGE_UNSTAGE_VOLUME", "NodeStageVolume")
    vol = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-node-stage-nocaps"))
    )
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeStageVolume,
        pb.NodeStageVolumeRequest(
            volume_id=vol.volume.volume_id,
            staging_target_path=sanity.staging,
            publish_context=DUMMY_PUBLISH_CONTEXT,
        ),
    )


# ---- NodeUnstageVolume ----
def test_node_unstage_volume_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeUnstageVolume / should fail when no volume id is provided"""
    need_node(sanity, "STAGE_UNSTAGE_VOLUME", "NodeUnstageVolume")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeUnstageVolume,
        pb.NodeUnstageVolumeRequest(staging_target_path=sanity.staging),
    )


def test_node_unstage_volume_should_fail_when_no_staging_target_path_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodeUnstageVolume / should fail when no staging target path is provided"""
    need_node(sanity, "STAGE_UNSTAGE_VOLUME", "NodeUnstageVolume")
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeUnstageVolume,
        pb.NodeUnstageVolumeRequest(volume_id=valid_volume_id()),
    )


# ---- the node round trip ----
def _run_controller_test(s: Sanity, count: int) -> None:
    """csi-sanity's runControllerTest: create on this node's topology, ControllerPublish, then
    NodeStage and NodePublish `count` times each, then NodeGetVolumeStats on the target."""
    node_id = s.node_id()
    request = s.create_volume_request(unique(f"sanity-node-full-{count}"))
    requirement = topology_requirement(s)
    if requirement is not None:
        request.accessibility_requirements.CopyFrom(requirement)
    vol = s.must_create_volume(request).volume
    cap = s.capability()
    publish_context = s.controller_publish_if_supported(vol, node_id, cap)
    for _ in range(count):
        s.node_stage_if_supported(vol, publish_context, cap)
    for _ in range(count):
        s.node_publish(vol, publish_context, cap)
    if node_cap(s.client, "GET_VOLUME_STATS"):
        stats = s.client.node.NodeGetVolumeStats(
            pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=s.target)
        )
        assert len(stats.usage) > 0, "NodeGetVolumeStats returned no usage"


def test_node_should_work(sanity: Sanity) -> None:
    """Node Service / should work"""
    need_plugin_service(sanity, "CONTROLLER_SERVICE", "Controller Service: CreateVolume")
    _run_controller_test(sanity, 1)


def test_node_should_be_idempotent(sanity: Sanity) -> None:
    """Node Service / should be idempotent"""
    need_plugin_service(sanity, "CONTROLLER_SERVICE", "Controller Service: CreateVolume")
    if sanity.config.idempotent_count <= 0:
        pytest.skip("Config.IdempotentCount is zero or negative, skip tests")
    _run_controller_test(sanity, sanity.config.idempotent_count)
