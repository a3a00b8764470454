from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api import convert
from csi_hostpath.api.status import rpc
from csi_hostpath.core.model import AccessType
from csi_hostpath.service.node import NodeService
from csi_hostpath.service.teardown import retry_when_full
from csi_hostpath.store.headroom import Headroom

if TYPE_CHECKING:
    # The controller's ledger, which a node-only process never loads.
    from csi_hostpath.api.self_publish import SelfPublish

RPC = pb.NodeServiceCapability.RPC
CAPABILITIES = (
    RPC.STAGE_UNSTAGE_VOLUME,
    RPC.GET_VOLUME_STATS,
    RPC.SINGLE_NODE_MULTI_WRITER,
    RPC.VOLUME_CONDITION,
    RPC.EXPAND_VOLUME,
    RPC.GET_VOLUME_HEALTH,
    RPC.GET_STORAGE_HEALTH,
)
Usage = pb.VolumeUsage


class NodeServicer(pb_grpc.NodeServicer):
    def __init__(
        self,
        service: NodeService,
        self_publish: SelfPublish | None = None,
        headroom: Headroom | None = None,
    ) -> None:
        self.service = service
        # Only with --self-publish (no attach in this deployment): the node publishes to itself.
        self.self_publish = self_publish
        self.headroom = headroom  # given back when a teardown finds the disk full

    def shared_lookups(self) -> AbstractContextManager[None]:
        """Opened first in each RPC's body: its mount lookups share one read of mountinfo."""
        return self.service.shared_lookups()

    @rpc
    def NodeStageVolume(
        self, request: pb.NodeStageVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeStageVolumeResponse:
        with self.shared_lookups():
            cap = convert.capability(request.volume_capability)
            publish_context = dict(request.publish_context)
            if self.self_publish is not None:
                publish_context = self.self_publish.publish(request.volume_id, cap, publish_context)
            self.service.stage(
                request.volume_id,
                request.staging_target_path,
                cap,
                publish_context,
                dict(request.volume_context),
            )
            return pb.NodeStageVolumeResponse()

    @rpc
    def NodeUnstageVolume(
        self, request: pb.NodeUnstageVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnstageVolumeResponse:
        with self.shared_lookups():
            retry_when_full(
                self.headroom,
                lambda: self.service.unstage(request.volume_id, request.staging_target_path),
            )
            if self.self_publish is not None:
                self.self_publish.unpublish(request.volume_id)
            return pb.NodeUnstageVolumeResponse()

    @rpc
    def NodePublishVolume(
        self, request: pb.NodePublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodePublishVolumeResponse:
        with self.shared_lookups():
            cap = convert.capability(request.volume_capability)
            self.service.publish(
                request.volume_id,
                request.staging_target_path,
                request.target_path,
                cap,
                request.readonly,
                dict(request.volume_context),
            )
            return pb.NodePublishVolumeResponse()

    @rpc
    def NodeUnpublishVolume(
        self, request: pb.NodeUnpublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnpublishVolumeResponse:
        with self.shared_lookups():
            retry_when_full(
                self.headroom,
                lambda: self.service.unpublish(request.volume_id, request.target_path),
            )
            return pb.NodeUnpublishVolumeResponse()

    @rpc
    def NodeGetVolumeStats(
        self, request: pb.NodeGetVolumeStatsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetVolumeStatsResponse:
        with self.shared_lookups():
            stats = self.service.stats(request.volume_id, request.volume_path)
            usage = [
                Usage(
                    unit=Usage.BYTES,
                    total=stats.total_bytes,
                    available=stats.available_bytes,
                    used=stats.used_bytes,
                )
            ]
            if stats.access_type == AccessType.MOUNT and not stats.abnormal:
                usage.append(
                    Usage(
                        unit=Usage.INODES,
                        total=stats.total_inodes,
                        available=stats.free_inodes,
                        used=stats.used_inodes,
                    )
                )
            return pb.NodeGetVolumeStatsResponse(
                usage=usage,
                volume_condition=pb.VolumeCondition(abnormal=stats.abnormal, message=stats.message),
            )

    @rpc
    def NodeGetCapabilities(
        self, request: pb.NodeGetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetCapabilitiesResponse:
        return pb.NodeGetCapabilitiesResponse(
            capabilities=[pb.NodeServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES]
        )

    @rpc
    def NodeGetInfo(
        self, request: pb.NodeGetInfoRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetInfoResponse:
        with self.shared_lookups():
            info = self.service.node_info()
            response = pb.NodeGetInfoResponse(
                node_id=info.node_id, max_volumes_per_node=info.max_volumes
            )
            if info.topology:
                response.accessible_topology.CopyFrom(pb.Topology(segments=info.topology))
            return response

    @rpc
    def NodeExpandVolume(
        self, request: pb.NodeExpandVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeExpandVolumeResponse:
        with self.shared_lookups():
            if request.HasField("volume_capability"):
                convert.capability(request.volume_capability)
            size = self.service.expand(
                request.volume_id, request.volume_path, request.capacity_range.required_bytes
            )
            return pb.NodeExpandVolumeResponse(capacity_bytes=size)

    @rpc
    def NodeGetVolumeHealth(
        self, request: pb.NodeGetVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetVolumeHealthResponse:
        with self.shared_lookups():
            problems = self.service.health(
                request.volume_id, request.volume_publish_path, request.staging_target_path
            )
            return pb.NodeGetVolumeHealthResponse(
                volume_health=convert.volume_health_to_pb(request.volume_id, problems)
            )

    @rpc
    def NodeGetStorageHealth(
        self, request: pb.NodeGetStorageHealthRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetStorageHealthResponse:
        with self.shared_lookups():
            Backend = pb.NodeGetStorageHealthResponse.StorageBackendHealth
            return pb.NodeGetStorageHealthResponse(
                backend_health=[
                    Backend(
                        status=pb.StorageHealthErrorType.Value(p.kind.name),
                        reason=p.reason,
                        message=p.message,
                    )
                    for p in self.service.storage_health()
                ]
            )
