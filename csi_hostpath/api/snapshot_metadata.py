"""The SnapshotMetadata service (CSI 1.10+, alpha): allocated and changed blocks of snapshots."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.service.controller.snapshot_metadata_service import (
    Metadata,
    SnapshotMetadataService,
)

VARIABLE = pb.BlockMetadataType.VARIABLE_LENGTH


def _blocks(page: list[tuple[int, int]]) -> list[pb.BlockMetadata]:
    return [pb.BlockMetadata(byte_offset=o, size_bytes=n) for o, n in page]


class SnapshotMetadataServicer(pb_grpc.SnapshotMetadataServicer):
    def __init__(self, service: SnapshotMetadataService) -> None:
        self.service = service

    @staticmethod
    def _empty_or(metadata: Metadata) -> Iterator[list[tuple[int, int]]]:
        # One message even when nothing is allocated or changed, so the capacity is told.
        sent = False
        for page in metadata.pages:
            sent = True
            yield page
        if not sent:
            yield []

    def GetMetadataAllocated(
        self, request: pb.GetMetadataAllocatedRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GetMetadataAllocatedResponse]:
        metadata = self.service.allocated(
            request.snapshot_id, request.starting_offset, request.max_results
        )
        for page in self._empty_or(metadata):
            yield pb.GetMetadataAllocatedResponse(
                block_metadata_type=VARIABLE,
                volume_capacity_bytes=metadata.capacity_bytes,
                block_metadata=_blocks(page),
            )

    def GetMetadataDelta(
        self, request: pb.GetMetadataDeltaRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GetMetadataDeltaResponse]:
        metadata = self.service.delta(
            request.base_snapshot_id,
            request.target_snapshot_id,
            request.starting_offset,
            request.max_results,
        )
        for page in self._empty_or(metadata):
            yield pb.GetMetadataDeltaResponse(
                block_metadata_type=VARIABLE,
                volume_capacity_bytes=metadata.capacity_bytes,
                block_metadata=_blocks(page),
            )
