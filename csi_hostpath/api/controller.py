"""The Controller service: each RPC's request translated for the controller's use-cases, and
their answer into its reply. The call pipeline (api/runtime/pipeline.py) runs around every
method."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc
from google.protobuf import wrappers_pb2

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api import convert
from csi_hostpath.api.runtime.copy_pool import CopyPool
from csi_hostpath.core.conditions import Problem
from csi_hostpath.core.model import Snapshot
from csi_hostpath.core.mutable import parse_mutable
from csi_hostpath.service.controller import ControllerService, CreatedVolume
from csi_hostpath.service.controller.modify import ModifyService
from csi_hostpath.service.controller.publish_ledger import PublishLedger
from csi_hostpath.service.controller.volume_condition import HEALTHY

T = TypeVar("T")
RPC = pb.ControllerServiceCapability.RPC
# GET_SNAPSHOT is advertised: the csi-sanity built from csi-test's v5.5.0 changelog knows it and
# runs its three GetSnapshot specs (an older release rejected unknown capabilities).
CAPABILITIES = (
    RPC.CREATE_DELETE_VOLUME,
    RPC.PUBLISH_UNPUBLISH_VOLUME,
    RPC.PUBLISH_READONLY,
    RPC.LIST_VOLUMES,
    RPC.LIST_VOLUMES_PUBLISHED_NODES,
    RPC.GET_CAPACITY,
    RPC.SINGLE_NODE_MULTI_WRITER,
    RPC.CREATE_DELETE_SNAPSHOT,
    RPC.LIST_SNAPSHOTS,
    RPC.GET_SNAPSHOT,
    RPC.CLONE_VOLUME,
    RPC.EXPAND_VOLUME,
    RPC.GET_VOLUME,
    RPC.VOLUME_CONDITION,
    RPC.MODIFY_VOLUME,
    RPC.GET_VOLUME_HEALTH,
    RPC.LIST_VOLUME_HEALTH,
)


def _condition(problems: list[Problem]) -> pb.VolumeCondition:
    """The v1.12 VolumeCondition: the worst problem's message."""
    if not problems:
        return pb.VolumeCondition(abnormal=False, message=HEALTHY)
    return pb.VolumeCondition(abnormal=True, message=problems[0].message)


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(
        self,
        service: ControllerService,
        ledger: PublishLedger,
        modify: ModifyService,
        copies: CopyPool,
    ) -> None:
        self.service = service
        self.ledger = ledger  # ControllerPublishVolume and ControllerUnpublishVolume
        self.modify = modify  # ControllerModifyVolume
        # Snapshot and clone copies run here, never for long on an RPC worker
        # (api/runtime/copy_pool.py).
        self.copies = copies

    def _copying(
        self, key: str, what: str, context: grpc.ServicerContext, work: Callable[[], T]
    ) -> T:
        return self.copies.run(key, what, work, context.time_remaining())

    def CreateVolume(
        self, request: pb.CreateVolumeRequest, context: grpc.ServicerContext
    ) -> pb.CreateVolumeResponse:
        tuning = parse_mutable(request.mutable_parameters)
        source = convert.content_source(request)

        def create() -> CreatedVolume:
            return self.service.create_volume(
                name=request.name,
                capabilities=convert.capabilities(request.volume_capabilities),
                required_bytes=request.capacity_range.required_bytes,
                limit_bytes=request.capacity_range.limit_bytes,
                parameters=dict(request.parameters),
                content_source=source,
                topology=convert.topology_requirement(request),
                tuning=tuning,
            )

        if source is None:
            created = create()  # no copy: quick, on this worker
        else:
            # The same request, and only it, waits on the same job.
            body = request.SerializeToString(deterministic=True)
            key = "volume:" + hashlib.sha256(body).hexdigest()
            created = self._copying(key, f"CreateVolume {request.name!r}", context, create)
        return pb.CreateVolumeResponse(
            volume=convert.volume_to_pb(created.volume, created.volume_context, created.topology)
        )

    def DeleteVolume(
        self, request: pb.DeleteVolumeRequest, context: grpc.ServicerContext
    ) -> pb.DeleteVolumeResponse:
        self.service.delete_volume(request.volume_id)
        return pb.DeleteVolumeResponse()

    def ControllerPublishVolume(
        self, request: pb.ControllerPublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerPublishVolumeResponse:
        cap = convert.capability(request.volume_capability)
        publish_context = self.ledger.publish(
            request.volume_id, request.node_id, cap, request.readonly
        )
        return pb.ControllerPublishVolumeResponse(publish_context=publish_context)

    def ControllerUnpublishVolume(
        self, request: pb.ControllerUnpublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerUnpublishVolumeResponse:
        self.ledger.unpublish(request.volume_id, request.node_id)
        return pb.ControllerUnpublishVolumeResponse()

    def ValidateVolumeCapabilities(
        self, request: pb.ValidateVolumeCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.ValidateVolumeCapabilitiesResponse:
        caps = convert.capabilities(request.volume_capabilities)
        confirmed, message = self.service.validate_capabilities(request.volume_id, caps)
        if not confirmed:
            return pb.ValidateVolumeCapabilitiesResponse(message=message)
        return pb.ValidateVolumeCapabilitiesResponse(
            confirmed=pb.ValidateVolumeCapabilitiesResponse.Confirmed(
                volume_context=dict(request.volume_context),
                volume_capabilities=request.volume_capabilities,
                parameters=dict(request.parameters),
            )
        )

    def ListVolumes(
        self, request: pb.ListVolumesRequest, context: grpc.ServicerContext
    ) -> pb.ListVolumesResponse:
        listed, next_token = self.service.list_volumes(request.starting_token, request.max_entries)
        entries = []
        for item in listed:
            c = self.service.created(item.volume)
            entries.append(
                pb.ListVolumesResponse.Entry(
                    volume=convert.volume_to_pb(c.volume, c.volume_context, c.topology),
                    status=pb.ListVolumesResponse.VolumeStatus(
                        published_node_ids=item.published_node_ids,
                        volume_condition=_condition(
                            self.service.problems(item.volume, item.published_node_ids)
                        ),
                    ),
                )
            )
        return pb.ListVolumesResponse(entries=entries, next_token=next_token)

    def GetCapacity(
        self, request: pb.GetCapacityRequest, context: grpc.ServicerContext
    ) -> pb.GetCapacityResponse:
        for i, cap in enumerate(request.volume_capabilities):
            convert.capability(cap, f"volume_capabilities[{i}]")
        topology = (
            dict(request.accessible_topology.segments)
            if request.HasField("accessible_topology")
            else None
        )
        available, maximum = self.service.get_capacity(topology)
        return pb.GetCapacityResponse(
            available_capacity=available,
            maximum_volume_size=wrappers_pb2.Int64Value(value=maximum),
        )

    def ControllerGetCapabilities(
        self, request: pb.ControllerGetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetCapabilitiesResponse:
        return pb.ControllerGetCapabilitiesResponse(
            capabilities=[pb.ControllerServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES]
        )

    def _snapshots(self, snaps: Sequence[Snapshot]) -> list[pb.Snapshot]:
        """Each snapshot with its group and, in local scope, the node it can be restored on."""
        groups = self.service.groups.group_ids([s.snapshot_id for s in snaps])
        return [
            convert.snapshot_to_pb(
                snap, group_id=group_id, topology=self.service.snapshot_topology(snap.snapshot_id)
            )
            for snap, group_id in zip(snaps, groups, strict=True)
        ]

    def CreateSnapshot(
        self, request: pb.CreateSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.CreateSnapshotResponse:
        snap = self._copying(
            f"snapshot:{request.name}\0{request.source_volume_id}",
            f"CreateSnapshot {request.name!r}",
            context,
            lambda: self.service.create_snapshot(
                request.source_volume_id, request.name, convert.topology_requirement(request)
            ),
        )
        return pb.CreateSnapshotResponse(snapshot=self._snapshots([snap])[0])

    def DeleteSnapshot(
        self, request: pb.DeleteSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.DeleteSnapshotResponse:
        self.service.groups.delete_snapshot(request.snapshot_id)
        return pb.DeleteSnapshotResponse()

    def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: grpc.ServicerContext
    ) -> pb.ListSnapshotsResponse:
        snaps, next_token = self.service.snapshots.list_snapshots(
            request.starting_token,
            request.max_entries,
            request.snapshot_id,
            request.source_volume_id,
        )
        return pb.ListSnapshotsResponse(
            entries=[pb.ListSnapshotsResponse.Entry(snapshot=s) for s in self._snapshots(snaps)],
            next_token=next_token,
        )

    def GetSnapshot(
        self, request: pb.GetSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.GetSnapshotResponse:
        snap = self.service.snapshots.get_snapshot(request.snapshot_id)
        return pb.GetSnapshotResponse(snapshot=self._snapshots([snap])[0])

    def ControllerExpandVolume(
        self, request: pb.ControllerExpandVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerExpandVolumeResponse:
        if request.HasField("volume_capability"):
            convert.capability(request.volume_capability)
        size, node_step = self.service.expand_volume(
            request.volume_id,
            request.capacity_range.required_bytes,
            request.capacity_range.limit_bytes,
        )
        return pb.ControllerExpandVolumeResponse(
            capacity_bytes=size, node_expansion_required=node_step
        )

    def ControllerGetVolume(
        self, request: pb.ControllerGetVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetVolumeResponse:
        item = self.service.get_volume(request.volume_id)
        c = self.service.created(item.volume)
        problems = self.service.problems(item.volume, item.published_node_ids)
        return pb.ControllerGetVolumeResponse(
            volume=convert.volume_to_pb(c.volume, c.volume_context, c.topology),
            status=pb.ControllerGetVolumeResponse.VolumeStatus(
                published_node_ids=item.published_node_ids,
                volume_condition=_condition(problems),
            ),
        )

    def ControllerModifyVolume(
        self, request: pb.ControllerModifyVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerModifyVolumeResponse:
        self.modify.modify(request.volume_id, request.mutable_parameters)
        return pb.ControllerModifyVolumeResponse()

    def ControllerGetVolumeHealth(
        self, request: pb.ControllerGetVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetVolumeHealthResponse:
        item = self.service.get_volume(request.volume_id)
        problems = self.service.problems(item.volume, item.published_node_ids)
        return pb.ControllerGetVolumeHealthResponse(
            volume_health=convert.volume_health_to_pb(item.volume.volume_id, problems)
        )

    def ControllerListVolumeHealth(
        self, request: pb.ControllerListVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.ControllerListVolumeHealthResponse:
        # ListVolumes' pages and tokens; a page lists only its abnormal volumes, as the spec
        # asks.
        listed, next_token = self.service.list_volumes(request.starting_token, request.max_entries)
        entries = []
        for item in listed:
            if problems := self.service.problems(item.volume, item.published_node_ids):
                entries.append(convert.volume_health_to_pb(item.volume.volume_id, problems))
        return pb.ControllerListVolumeHealthResponse(entries=entries, next_token=next_token)
