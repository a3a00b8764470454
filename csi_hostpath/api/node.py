"""The Node service: each RPC's request translated for the node's use-cases, and their answer
into its reply. The call pipeline (api/runtime/pipeline.py) runs around every method."""

from __future__ import annotations

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api import convert
from csi_hostpath.core.model import AccessType
from csi_hostpath.service.node import NodeService
from csi_hostpath.service.node.self_publish import Stages

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
    def __init__(self, service: NodeService, stages: Stages | None = None) -> None:
        self.service = service
        # NodeStage and NodeUnstage: the service's, or with --self-publish (no attach in this
        # deployment) the use-case that publishes to the node itself around them.
        self.stages = stages if stages is not None else service

    def NodeStageVolume(
        self, request: pb.NodeStageVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeStageVolumeResponse:
        self.stages.stage(
            request.volume_id,
            request.staging_target_path,
            convert.capability(request.volume_capability),
            dict(request.publish_context),
            dict(request.volume_context),
        )
        return pb.NodeStageVolumeResponse()

    def NodeUnstageVolume(
        self, request: pb.NodeUnstageVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnstageVolumeResponse:
        self.stages.unstage(request.volume_id, request.staging_target_path)
        return pb.NodeUnstageVolumeResponse()

    def NodePublishVolume(
        self, request: pb.NodePublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodePublishVolumeResponse:
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

    def NodeUnpublishVolume(
        self, request: pb.NodeUnpublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeUnpublishVolumeResponse:
        self.service.unpublish(request.volume_id, request.target_path)
        return pb.NodeUnpublishVolumeResponse()

    def NodeGetVolumeStats(
        self, request: pb.NodeGetVolumeStatsRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetVolumeStatsResponse:
        stats = self.service.volumes.stats(request.volume_id, request.volume_path)
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

    def NodeGetCapabilities(
        self, request: pb.NodeGetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetCapabilitiesResponse:
        return pb.NodeGetCapabilitiesResponse(
            capabilities=[pb.NodeServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES]
        )

    def NodeGetInfo(
        self, request: pb.NodeGetInfoRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetInfoResponse:
        info = self.service.node_info()
        response = pb.NodeGetInfoResponse(
            node_id=info.node_id, max_volumes_per_node=info.max_volumes
        )
        if info.topology:
            response.accessible_topology.CopyFrom(pb.Topology(segments=info.topology))
        return response

    def NodeExpandVolume(
        self, request: pb.NodeExpandVolumeRequest, context: grpc.ServicerContext
    ) -> pb.NodeExpandVolumeResponse:
        if request.HasField("volume_capability"):
            convert.capability(request.volume_capability)
        size = self.service.volumes.expand(
            request.volume_id, request.volume_path, request.capacity_range.required_bytes
        )
        return pb.NodeExpandVolumeResponse(capacity_bytes=size)

    def NodeGetVolumeHealth(
        self, request: pb.NodeGetVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetVolumeHealthResponse:
        problems = self.service.volumes.health(
            request.volume_id, request.volume_publish_path, request.staging_target_path
        )
        return pb.NodeGetVolumeHealthResponse(
            volume_health=convert.volume_health_to_pb(request.volume_id, problems)
        )

    def NodeGetStorageHealth(
        self, request: pb.NodeGetStorageHealthRequest, context: grpc.ServicerContext
    ) -> pb.NodeGetStorageHealthResponse:
        Backend = pb.NodeGetStorageHealthResponse.StorageBackendHealth
        return pb.NodeGetStorageHealthResponse(
            backend_health=[
                Backend(
                    status=pb.StorageHealthErrorType.Value(p.kind.name),
                    reason=p.reason,
                    message=p.message,
                )
                for p in self.service.volumes.storage_health()
            ]
        )
