"""What the csi-sanity-equivalent test files share: the skips csi-sanity's BeforeEach blocks
decide, the topology its cases ask for, and the chain its Node cases take to a published volume."""

from __future__ import annotations

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import controller_cap, enum_value, node_cap, plugin_service
from tests.conformance.sanity_config import unique

NodeRPCType = pb.NodeServiceCapability.RPC.Type


def need_controller(s: Sanity, name: str, what: str) -> None:
    if not controller_cap(s.client, name):
        pytest.skip(f"{what} not supported: the driver does not advertise controller {name}")


def need_node(s: Sanity, name: str, what: str) -> None:
    if enum_value(NodeRPCType, name) is None:
        pytest.skip(
            f"{what} not supported: node capability {name} does not exist in this proto, "
            "so the driver cannot advertise it"
        )
    if not node_cap(s.client, name):
        pytest.skip(f"{what} not supported: the driver does not advertise node {name}")


def need_plugin_service(s: Sanity, name: str, what: str) -> None:
    if not plugin_service(s.client, name):
        pytest.skip(f"{what} not supported: the driver does not advertise plugin service {name}")


def topology_requirement(s: Sanity) -> pb.TopologyRequirement | None:
    """The node's own topology as the only requisite, when the driver reports one: csi-sanity
    assumes a single-node setup where topology-aware provisioning picks this node."""
    info = s.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
    if not info.HasField("accessible_topology"):
        return None
    return pb.TopologyRequirement(requisite=[info.accessible_topology])


def staged_and_published(
    s: Sanity, prefix: str, cap: pb.VolumeCapability | None = None
) -> tuple[pb.Volume, dict[str, str]]:
    """createVolume, then controllerPublishVolume, nodeStageVolume and nodePublishVolume as
    csi-sanity's Node cases chain them, to this node's target."""
    cap = cap or s.capability()
    request = s.create_volume_request(unique(prefix))
    request.ClearField("volume_capabilities")
    request.volume_capabilities.append(cap)
    vol = s.must_create_volume(request).volume
    publish_context = s.controller_publish_if_supported(vol, s.node_id(), cap)
    s.node_stage_if_supported(vol, publish_context, cap)
    s.node_publish(vol, publish_context, cap)
    return vol, publish_context
