"""The GroupController service: volume group snapshots (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT)."""

from __future__ import annotations

import hashlib

import grpc
from google.protobuf import timestamp_pb2

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api import convert
from csi_hostpath.api.runtime.copy_pool import CopyPool
from csi_hostpath.core.model import Snapshot
from csi_hostpath.service.controller import ControllerService
from csi_hostpath.store.groups import GroupRecord

GroupCap = pb.GroupControllerServiceCapability


def group_to_pb(record: GroupRecord, members: list[Snapshot]) -> pb.VolumeGroupSnapshot:
    created = timestamp_pb2.Timestamp()
    created.FromNanoseconds(int(record.created_at * 1e9))
    return pb.VolumeGroupSnapshot(
        group_snapshot_id=record.group_id,
        snapshots=[convert.snapshot_to_pb(s, group_id=record.group_id) for s in members],
        creation_time=created,
        ready_to_use=all(s.ready for s in members),
    )


class GroupControllerServicer(pb_grpc.GroupControllerServicer):
    def __init__(self, service: ControllerService, copies: CopyPool) -> None:
        self.service = service  # its group snapshots, made of its snapshots under its freeze
        # The group's freeze and its cuts run as one job on the copy pool
        # (api/runtime/copy_pool.py): in one thread, so each member's cut finds the freeze the
        # group holds.
        self.copies = copies

    def GroupControllerGetCapabilities(
        self, request: pb.GroupControllerGetCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.GroupControllerGetCapabilitiesResponse:
        rpc_type = GroupCap.RPC.CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT
        return pb.GroupControllerGetCapabilitiesResponse(
            capabilities=[GroupCap(rpc=GroupCap.RPC(type=rpc_type))]
        )

    def CreateVolumeGroupSnapshot(
        self, request: pb.CreateVolumeGroupSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.CreateVolumeGroupSnapshotResponse:
        key = "group:" + hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()
        record = self.copies.run(
            key,
            f"CreateVolumeGroupSnapshot {request.name!r}",
            lambda: self.service.groups.create(request.name, list(request.source_volume_ids)),
            context.time_remaining(),
        )
        _, members = self.service.groups.get(record.group_id, [])
        return pb.CreateVolumeGroupSnapshotResponse(group_snapshot=group_to_pb(record, members))

    def GetVolumeGroupSnapshot(
        self, request: pb.GetVolumeGroupSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.GetVolumeGroupSnapshotResponse:
        record, members = self.service.groups.get(
            request.group_snapshot_id, list(request.snapshot_ids)
        )
        return pb.GetVolumeGroupSnapshotResponse(group_snapshot=group_to_pb(record, members))

    def DeleteVolumeGroupSnapshot(
        self, request: pb.DeleteVolumeGroupSnapshotRequest, context: grpc.ServicerContext
    ) -> pb.DeleteVolumeGroupSnapshotResponse:
        self.service.groups.delete(request.group_snapshot_id, list(request.snapshot_ids))
        return pb.DeleteVolumeGroupSnapshotResponse()
