from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

import grpc
from google.protobuf import wrappers_pb2

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api import convert
from csi_hostpath.api.copy_pool import CopyPool
from csi_hostpath.api.status import rpc
from csi_hostpath.core.conditions import Problem
from csi_hostpath.core.model import Snapshot
from csi_hostpath.service.controller import ControllerService, CreatedVolume
from csi_hostpath.service.controller.group_snapshots import GroupSnapshots
from csi_hostpath.service.controller.modify import ModifyService
from csi_hostpath.service.controller.publish_ledger import PublishLedger
from csi_hostpath.service.controller.volume_condition import HEALTHY
from csi_hostpath.service.teardown import retry_when_full
from csi_hostpath.store.headroom import Headroom

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
        groups: GroupSnapshots,
        copies: CopyPool,
        headroom: Headroom | None = None,
    ) -> None:
        self.service = service
        self.ledger = ledger  # ControllerPublishVolume and ControllerUnpublishVolume
        self.modify = modify
        self.groups = groups
        self.headroom = headroom  # given back when a teardown finds the disk full
        # Snapshot and clone copies run here, never for long on an RPC worker (api/copy_pool.py).
        self.copies = copies

    def shared_lookups(self) -> AbstractContextManager[None]:
        """Opened first in each RPC's body: its mount lookups share one read of mountinfo. The
        controller looks mounts up too: a copy in --mode all freezes the volume where this
        process's node mounted it."""
        return self.service.shared_lookups()

    def _copying(
        self, key: str, what: str, context: grpc.ServicerContext, work: Callable[[], T]
    ) -> T:
        return self.copies.run(key, what, work, context.time_remaining())

    @rpc
    def CreateVolume(
        self, request: pb.CreateVolumeRequest, context: grpc.ServicerContext
    ) -> pb.CreateVolumeResponse:
        with self.shared_lookups():
            tuning = self.modify.check(request.mutable_parameters)
            source = convert.content_source(request)

            def create() -> CreatedVolume:
                created = self.service.create_volume(
                    name=request.name,
                    capabilities=convert.capabilities(request.volume_capabilities),
                    required_bytes=request.capacity_range.required_bytes,
                    limit_bytes=request.capacity_range.limit_bytes,
                    parameters=dict(request.parameters),
                    content_source=source,
                    topology=convert.topology_requirement(request),
                )
                self.modify.created(created.volume.volume_id, tuning)
                return created

            if source is None:
                created = create()  # no copy: quick, on this worker
            else:
                # The same request, and only it, waits on the same job.
                body = request.SerializeToString(deterministic=True)
                key = "volume:" + hashlib.sha256(body).hexdigest()
                created = self._copying(key, f"CreateVolume {request.name!r}", context, create)
            return pb.CreateVolumeResponse(
                volume=convert.volume_to_pb(
                    created.volume, created.volume_context, created.topology
                )
            )

    @rpc
    def DeleteVolume(
        self, request: pb.DeleteVolumeRequest, context: grpc.ServicerContext
    ) -> pb.DeleteVolumeResponse:
        with self.shared_lookups():
            retry_when_full(self.headroom, lambda: self.service.delete_volume(request.volume_id))
            self.modify.deleted(request.volume_id)
            return pb.DeleteVolumeResponse()

    @rpc
    def ControllerPublishVolume(
        self, request: pb.ControllerPublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerPublishVolumeResponse:
        with self.shared_lookups():
            cap = convert.capability(request.volume_capability)
            publish_context = self.ledger.publish(
                request.volume_id, request.node_id, cap, request.readonly
            )
            return pb.ControllerPublishVolumeResponse(publish_context=publish_context)

    @rpc
    def ControllerUnpublishVolume(
        self, request: pb.ControllerUnpublishVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerUnpublishVolumeResponse:
        with self.shared_lookups():
            retry_when_full(
                self.headroom, lambda: self.ledger.unpublish(request.volume_id, request.node_id)
            )
            return pb.ControllerUnpublishVolumeResponse()

    @rpc
    def ValidateVolumeCapabilities(
        self, request: pb.ValidateVolumeCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.ValidateVolumeCapabilitiesResponse:
        with self.shared_lookups():
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

    @rpc
    def ListVolumes(
        self, request: pb.ListVolumesRequest, context: grpc.ServicerContext
    ) -> pb.ListVolumesResponse:
        with self.shared_lookups():
            listed, next_token = self.service.list_volumes(
                request.starting_token, request.max_entries
            )
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

    @rpc
    def GetCapacity(
        self, request: pb.GetCapacityRequest, context: grpc.ServicerContext
    ) -> pb.GetCapacityResponse:
        with self.shared_lookups():
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

    @rpc
    def ControllerGetCapabilities(
        self, request: pb.ControllerGetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetCapabilitiesResponse:
        return pb.ControllerGetCapabilitiesResponse(
            capabilities=[pb.ControllerServiceCapability(rpc=RPC(type=t)) for t in CAPABILITIES]
        )

    def _snapshot(self, snap: Snapshot, group_id: str | None = None) -> pb.Snapshot:
        """The snapshot with its group and, in local scope, the node it can be restored on."""
        return convert.snapshot_to_pb(
            snap,
            group_id=self.groups.group_of(snap.snapshot_id) if group_id is None else group_id,
            topology=self.service.snapshot_topology(snap.snapshot_id),
        )

    @rpc
    def CreateSnapshot(
        self, request: pb.CreateSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.CreateSnapshotResponse:
        with self.shared_lookups():
            snap = self._copying(
                f"snapshot:{request.name}\0{request.source_volume_id}",
                f"CreateSnapshot {request.name!r}",
                context,
                lambda: self.service.create_snapshot(
                    request.source_volume_id, request.name, convert.topology_requirement(request)
                ),
            )
            return pb.CreateSnapshotResponse(snapshot=self._snapshot(snap))

    @rpc
    def DeleteSnapshot(
        self, request: pb.DeleteSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.DeleteSnapshotResponse:
        with self.shared_lookups():
            self.groups.delete_snapshot(request.snapshot_id)
            return pb.DeleteSnapshotResponse()

    @rpc
    def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: grpc.ServicerContext
    ) -> pb.ListSnapshotsResponse:
        with self.shared_lookups():
            snaps, next_token = self.service.list_snapshots(
                request.starting_token,
                request.max_entries,
                request.snapshot_id,
                request.source_volume_id,
            )
            groups = self.groups.member_index()
            return pb.ListSnapshotsResponse(
                entries=[
                    pb.ListSnapshotsResponse.Entry(
                        snapshot=self._snapshot(s, groups.get(s.snapshot_id, ""))
                    )
                    for s in snaps
                ],
                next_token=next_token,
            )

    @rpc
    def GetSnapshot(
        self, request: pb.GetSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.GetSnapshotResponse:
        with self.shared_lookups():
            return pb.GetSnapshotResponse(
                snapshot=self._snapshot(self.service.get_snapshot(request.snapshot_id))
            )

    @rpc
    def ControllerExpandVolume(
        self, request: pb.ControllerExpandVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerExpandVolumeResponse:
        with self.shared_lookups():
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

    @rpc
    def ControllerGetVolume(
        self, request: pb.ControllerGetVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetVolumeResponse:
        with self.shared_lookups():
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

    @rpc
    def ControllerModifyVolume(
        self, request: pb.ControllerModifyVolumeRequest, context: grpc.ServicerContext
    ) -> pb.ControllerModifyVolumeResponse:
        with self.shared_lookups():
            self.modify.modify(request.volume_id, request.mutable_parameters)
            return pb.ControllerModifyVolumeResponse()

    @rpc
    def ControllerGetVolumeHealth(
        self, request: pb.ControllerGetVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.ControllerGetVolumeHealthResponse:
        with self.shared_lookups():
            item = self.service.get_volume(request.volume_id)
            problems = self.service.problems(item.volume, item.published_node_ids)
            return pb.ControllerGetVolumeHealthResponse(
                volume_health=convert.volume_health_to_pb(item.volume.volume_id, problems)
            )

    @rpc
    def ControllerListVolumeHealth(
        self, request: pb.ControllerListVolumeHealthRequest, context: grpc.ServicerContext
    ) -> pb.ControllerListVolumeHealthResponse:
        with self.shared_lookups():
            # ListVolumes' pages and tokens; a page lists only its abnormal volumes, as the spec
            # asks.
            listed, next_token = self.service.list_volumes(
                request.starting_token, request.max_entries
            )
            entries = []
            for item in listed:
                if problems := self.service.problems(item.volume, item.published_node_ids):
                    entries.append(convert.volume_health_to_pb(item.volume.volume_id, problems))
            return pb.ControllerListVolumeHealthResponse(entries=entries, next_token=next_token)
