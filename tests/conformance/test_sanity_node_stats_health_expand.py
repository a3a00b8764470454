"""csi-sanity's Node Service cases: NodeGetVolumeStats, the health RPCs, NodeExpandVolume."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import controller_cap, expect_error_code, plugin_service
from tests.conformance.sanity_config import unique, valid_volume_id
from tests.conformance.sanity_steps import need_node, staged_and_published

C = grpc.StatusCode

# =============================================================================================
# Node Service
# =============================================================================================


# ---- NodeGetVolumeStats ----
def _need_stats(s: Sanity) -> None:
    need_node(s, "GET_VOLUME_STATS", "NodeGetVolume")


def test_node_get_volume_stats_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeGetVolumeStats / should fail when no volume id is provided"""
    _need_stats(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeGetVolumeStats,
        pb.NodeGetVolumeStatsRequest(volume_path="some/path"),
    )


def test_node_get_volume_stats_should_fail_when_no_volume_path_is_provided(
    sanity: Sanity,
) -> None:
    """Node Service / NodeGetVolumeStats / should fail when no volume path is provided"""
    _need_stats(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeGetVolumeStats,
        pb.NodeGetVolumeStatsRequest(volume_id=valid_volume_id()),
    )


def test_node_get_volume_stats_should_fail_when_volume_is_not_found(sanity: Sanity) -> None:
    """Node Service / NodeGetVolumeStats / should fail when volume is not found"""
    _need_stats(sanity)
    expect_error_code(
        C.NOT_FOUND,
        sanity.client.node.NodeGetVolumeStats,
        pb.NodeGetVolumeStatsRequest(volume_id=valid_volume_id(), volume_path="some/path"),
    )


def test_node_get_volume_stats_should_fail_when_volume_does_not_exist_on_the_specified_path(
    sanity: Sanity,
) -> None:
    """Node Service / NodeGetVolumeStats / should fail when volume does not exist on the
    specified path"""
    _need_stats(sanity)
    vol, _ = staged_and_published(sanity, "sanity-node-get-volume-stats")
    expect_error_code(
        C.NOT_FOUND,
        sanity.client.node.NodeGetVolumeStats,
        pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path="some/path"),
    )


# ---- NodeExpandVolume ----
def _need_node_expand(s: Sanity) -> None:
    need_node(s, "EXPAND_VOLUME", "NodeExpandVolume")


def test_node_expand_volume_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeExpandVolume / should fail when no volume id is provided"""
    _need_node_expand(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeExpandVolume,
        pb.NodeExpandVolumeRequest(
            volume_path=str(sanity.target_path), volume_capability=sanity.capability()
        ),
    )


def test_node_expand_volume_should_fail_when_no_volume_path_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeExpandVolume / should fail when no volume path is provided"""
    _need_node_expand(sanity)
    vol = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-node-expand-volume-valid-id"))
    )
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.client.node.NodeExpandVolume,
        pb.NodeExpandVolumeRequest(
            volume_id=vol.volume.volume_id, volume_capability=sanity.capability()
        ),
    )


def test_node_expand_volume_should_fail_when_volume_is_not_found(sanity: Sanity) -> None:
    """Node Service / NodeExpandVolume / should fail when volume is not found"""
    _need_node_expand(sanity)
    expect_error_code(
        C.NOT_FOUND,
        sanity.client.node.NodeExpandVolume,
        pb.NodeExpandVolumeRequest(volume_id=valid_volume_id(), volume_path="some/path"),
    )


def test_node_expand_volume_should_work_if_node_expand_is_called_after_node_publish(
    sanity: Sanity,
) -> None:
    """Node Service / NodeExpandVolume / should work if node-expand is called after
    node-publish"""
    _need_node_expand(sanity)
    expand_size = sanity.config.expand_size()
    request = sanity.create_volume_request(unique("sanity-node-expand-volume"))
    vol = sanity.must_create_volume(request).volume
    if plugin_service(sanity.client, "CONTROLLER_SERVICE") and controller_cap(
        sanity.client, "EXPAND_VOLUME"
    ):
        res = sanity.client.controller.ControllerExpandVolume(
            pb.ControllerExpandVolumeRequest(
                volume_id=vol.volume_id,
                capacity_range=pb.CapacityRange(required_bytes=expand_size),
            )
        )
        assert res.capacity_bytes == expand_size
    cap = sanity.capability()
    publish_context = sanity.controller_publish_if_supported(vol, sanity.node_id(), cap)
    sanity.node_stage_if_supported(vol, publish_context, cap)
    sanity.node_publish(vol, publish_context, cap)
    sanity.client.node.NodeExpandVolume(
        pb.NodeExpandVolumeRequest(
            volume_id=vol.volume_id,
            volume_path=sanity.target,
            capacity_range=pb.CapacityRange(required_bytes=expand_size),
        )
    )


# ---- NodeGetVolumeHealth / NodeGetStorageHealth ----
# CSI v1.13's node health RPCs, as csi-test v5.6.0's node.go tests them.
def test_node_get_volume_health_should_fail_when_no_volume_id_is_provided(sanity: Sanity) -> None:
    """Node Service / NodeGetVolumeHealth / should fail when no volume id is provided"""
    need_node(sanity, "GET_VOLUME_HEALTH", "NodeGetVolumeHealth")
    with pytest.raises(grpc.RpcError) as info:
        sanity.client.node.NodeGetVolumeHealth(pb.NodeGetVolumeHealthRequest())
    assert info.value.code() == C.INVALID_ARGUMENT


def test_node_get_volume_health_should_return_health_for_a_valid_volume(sanity: Sanity) -> None:
    """Node Service / NodeGetVolumeHealth / should return health for a valid volume"""
    need_node(sanity, "GET_VOLUME_HEALTH", "NodeGetVolumeHealth")
    vol = sanity.must_create_volume(
        sanity.create_volume_request(unique("sanity-node-get-volume-health"))
    ).volume
    cap = sanity.capability()
    publish_context = sanity.controller_publish_if_supported(vol, sanity.node_id(), cap)
    sanity.node_stage_if_supported(vol, publish_context, cap)
    sanity.node_publish(vol, publish_context, cap)
    reply = sanity.client.node.NodeGetVolumeHealth(
        pb.NodeGetVolumeHealthRequest(volume_id=vol.volume_id)
    )
    assert reply.HasField("volume_health")
    assert reply.volume_health.volume_id == vol.volume_id
    # Beyond csi-sanity: a freshly published volume has nothing wrong with it.
    assert list(reply.volume_health.health_statuses) == []


def test_node_get_storage_health_should_return_appropriate_response(sanity: Sanity) -> None:
    """Node Service / NodeGetStorageHealth / should return appropriate response"""
    need_node(sanity, "GET_STORAGE_HEALTH", "NodeGetStorageHealth")
    reply = sanity.client.node.NodeGetStorageHealth(pb.NodeGetStorageHealthRequest())
    assert list(reply.backend_health) == []  # beyond csi-sanity: a healthy pool
