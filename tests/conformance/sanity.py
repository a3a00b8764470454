"""The csi-sanity harness, re-implemented: its per-test target and staging directories, its
resource tracking with last-in-first-out cleanup, and the requests it builds (its configuration
and names are in sanity_config.py, its checks in sanity_checks.py). Written from what csi-sanity's
sources show it doing (docs/conformance.md says which), not translated from its code.

Everything here talks to the driver over gRPC only, the way csi-sanity does: nothing reaches
into the driver's state directory, so a pass here means the same as a pass there."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity_checks import (
    controller_cap,
    node_cap,
    plugin_service,
    verify_snapshot_info,
)
from tests.conformance.sanity_config import SanityConfig
from tests.conftest import Client

Mode = pb.VolumeCapability.AccessMode
StatusCode = grpc.StatusCode


# ---- the test context ----------------------------------------------------------------------
@dataclass
class _Tracked:
    resource_id: str
    kind: str  # "volume" or "snapshot"
    node_id: str = ""  # for a volume: the node it was controller-published to, if any


@dataclass
class Sanity:
    """What one csi-sanity test sees: a driver connection, the configuration, its own target
    (parent) and staging directories, and the resources it made, cleaned up afterwards."""

    client: Client
    config: SanityConfig
    target_path: Path  # the *parent* directory; the volume is published at target_path/target
    staging_path: Path
    _tracked: list[_Tracked] = field(default_factory=list)

    @property
    def target(self) -> str:
        return str(self.target_path / "target")

    @property
    def staging(self) -> str:
        return str(self.staging_path)

    # -- request builders --
    def capability(
        self, mode: Mode.Mode.ValueType = Mode.SINGLE_NODE_WRITER
    ) -> pb.VolumeCapability:
        """csi-sanity's default capability: a mount volume with no fs_type and no flags (the
        driver picks the filesystem), or a block volume with --csi.testvolumeaccesstype=block."""
        if self.config.test_volume_access_type.strip().lower() == "block":
            return pb.VolumeCapability(
                block=pb.VolumeCapability.BlockVolume(), access_mode=Mode(mode=mode)
            )
        return pb.VolumeCapability(
            mount=pb.VolumeCapability.MountVolume(), access_mode=Mode(mode=mode)
        )

    def create_volume_request(self, name: str) -> pb.CreateVolumeRequest:
        """MakeCreateVolumeReq: the test size as both required and limit bytes."""
        size = self.config.test_volume_size
        return pb.CreateVolumeRequest(
            name=name,
            volume_capabilities=[self.capability()],
            capacity_range=pb.CapacityRange(required_bytes=size, limit_bytes=size),
            parameters=self.config.test_volume_parameters,
        )

    def create_snapshot_request(self, name: str, source_volume_id: str) -> pb.CreateSnapshotRequest:
        return pb.CreateSnapshotRequest(
            name=name,
            source_volume_id=source_volume_id,
            parameters=self.config.test_snapshot_parameters,
        )

    def controller_publish_request(
        self, volume_id: str, node_id: str
    ) -> pb.ControllerPublishVolumeRequest:
        return pb.ControllerPublishVolumeRequest(
            volume_id=volume_id,
            node_id=node_id,
            volume_capability=self.capability(),
            readonly=False,
        )

    def expand_request(self, volume_id: str) -> pb.ControllerExpandVolumeRequest:
        return pb.ControllerExpandVolumeRequest(
            volume_id=volume_id,
            capacity_range=pb.CapacityRange(required_bytes=self.config.expand_size()),
            volume_capability=self.capability(),
        )

    def modify_request(self, volume_id: str) -> pb.ControllerModifyVolumeRequest:
        return pb.ControllerModifyVolumeRequest(
            volume_id=volume_id, mutable_parameters=self.config.test_volume_mutable_parameters
        )

    # -- tracked calls: what csi-sanity's Resources wrapper registers for cleanup --
    def create_volume(self, request: pb.CreateVolumeRequest) -> pb.CreateVolumeResponse:
        response: pb.CreateVolumeResponse = self.client.controller.CreateVolume(request)
        if response.volume.volume_id:
            self._tracked.append(_Tracked(response.volume.volume_id, "volume"))
        return response

    def must_create_volume(self, request: pb.CreateVolumeRequest) -> pb.CreateVolumeResponse:
        response = self.create_volume(request)
        assert response.HasField("volume"), "volume in response is nil"
        assert response.volume.volume_id, "volume ID in response is missing"
        return response

    def delete_volume(self, volume_id: str) -> None:
        self.client.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=volume_id))
        self._forget(volume_id)

    def controller_publish(
        self, request: pb.ControllerPublishVolumeRequest
    ) -> pb.ControllerPublishVolumeResponse:
        response: pb.ControllerPublishVolumeResponse = (
            self.client.controller.ControllerPublishVolume(request)
        )
        if request.volume_id and request.node_id:
            # One more entry per publish, as csi-sanity keeps: cleanup then unpublishes it.
            self._tracked.append(_Tracked(request.volume_id, "volume", request.node_id))
        return response

    def create_snapshot(self, request: pb.CreateSnapshotRequest) -> pb.CreateSnapshotResponse:
        response: pb.CreateSnapshotResponse = self.client.controller.CreateSnapshot(request)
        if response.snapshot.snapshot_id:
            self._tracked.append(_Tracked(response.snapshot.snapshot_id, "snapshot"))
        return response

    def must_create_snapshot(self, request: pb.CreateSnapshotRequest) -> pb.CreateSnapshotResponse:
        response = self.create_snapshot(request)
        verify_snapshot_info(response.snapshot)
        return response

    def must_create_snapshot_from_volume(
        self, volume_request: pb.CreateVolumeRequest, snapshot_name: str
    ) -> tuple[pb.CreateSnapshotResponse, pb.CreateVolumeResponse]:
        volume = self.must_create_volume(volume_request)
        snap = self.must_create_snapshot(
            self.create_snapshot_request(snapshot_name, volume.volume.volume_id)
        )
        return snap, volume

    def delete_snapshot(self, snapshot_id: str) -> None:
        self.client.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snapshot_id))
        self._forget(snapshot_id)

    def _forget(self, resource_id: str) -> None:
        for i, item in enumerate(self._tracked):
            if item.resource_id == resource_id:
                del self._tracked[i]
                return

    # -- node-side steps shared by the Node cases (csi-sanity's closures of the same names) --
    def node_id(self) -> str:
        info = self.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
        assert info.node_id, "NodeGetInfo returned an empty node_id"
        return str(info.node_id)

    def controller_publish_if_supported(
        self, volume: pb.Volume, node_id: str, cap: pb.VolumeCapability
    ) -> dict[str, str]:
        """ControllerPublish when PUBLISH_UNPUBLISH_VOLUME is advertised; the publish_context."""
        if not (
            plugin_service(self.client, "CONTROLLER_SERVICE")
            and controller_cap(self.client, "PUBLISH_UNPUBLISH_VOLUME")
        ):
            return {}
        response = self.controller_publish(
            pb.ControllerPublishVolumeRequest(
                volume_id=volume.volume_id,
                node_id=node_id,
                volume_capability=cap,
                volume_context=volume.volume_context,
                readonly=False,
            )
        )
        return dict(response.publish_context)

    def node_stage_if_supported(
        self, volume: pb.Volume, publish_context: dict[str, str], cap: pb.VolumeCapability
    ) -> None:
        if not node_cap(self.client, "STAGE_UNSTAGE_VOLUME"):
            return
        self.client.node.NodeStageVolume(
            pb.NodeStageVolumeRequest(
                volume_id=volume.volume_id,
                staging_target_path=self.staging,
                volume_capability=cap,
                volume_context=volume.volume_context,
                publish_context=publish_context,
            )
        )

    def node_publish(
        self,
        volume: pb.Volume,
        publish_context: dict[str, str],
        cap: pb.VolumeCapability,
        target: str | None = None,
    ) -> None:
        staging = self.staging if node_cap(self.client, "STAGE_UNSTAGE_VOLUME") else ""
        self.client.node.NodePublishVolume(
            pb.NodePublishVolumeRequest(
                volume_id=volume.volume_id,
                target_path=target or self.target,
                staging_target_path=staging,
                volume_capability=cap,
                volume_context=volume.volume_context,
                publish_context=publish_context,
            )
        )

    def wait_snapshot_ready(self, request: pb.CreateSnapshotRequest) -> pb.CreateSnapshotResponse:
        """Repeat CreateSnapshot until ready_to_use, as csi-sanity does (bounded here)."""
        deadline = time.monotonic() + 60
        while True:
            snap = self.must_create_snapshot(request)
            if snap.snapshot.ready_to_use or time.monotonic() > deadline:
                return snap
            time.sleep(0.5)

    # -- csi-sanity's Resources.Cleanup --
    def cleanup(self) -> None:
        """Undo everything this test made, newest first, and fail if any step fails.

        Per volume entry: NodeUnpublish of the shared target and (if STAGE_UNSTAGE_VOLUME)
        NodeUnstage of the shared staging path, where NOT_FOUND is fine; then, for an entry
        made by a ControllerPublish, ControllerUnpublish from that node; then DeleteVolume. Per
        snapshot: DeleteSnapshot. Everything but the node steps must succeed."""
        errors: list[str] = []
        stage = node_cap(self.client, "STAGE_UNSTAGE_VOLUME")
        tracked, self._tracked = self._tracked, []
        for item in reversed(tracked):
            if item.kind == "snapshot":
                errors += self._try(
                    "DeleteSnapshot",
                    self.client.controller.DeleteSnapshot,
                    pb.DeleteSnapshotRequest(snapshot_id=item.resource_id),
                )
                continue
            errors += self._try(
                "NodeUnpublishVolume",
                self.client.node.NodeUnpublishVolume,
                pb.NodeUnpublishVolumeRequest(volume_id=item.resource_id, target_path=self.target),
                not_found_ok=True,
            )
            if stage:
                errors += self._try(
                    "NodeUnstageVolume",
                    self.client.node.NodeUnstageVolume,
                    pb.NodeUnstageVolumeRequest(
                        volume_id=item.resource_id, staging_target_path=self.staging
                    ),
                    not_found_ok=True,
                )
            if item.node_id:
                errors += self._try(
                    "ControllerUnpublishVolume",
                    self.client.controller.ControllerUnpublishVolume,
                    pb.ControllerUnpublishVolumeRequest(
                        volume_id=item.resource_id, node_id=item.node_id
                    ),
                )
            errors += self._try(
                "DeleteVolume",
                self.client.controller.DeleteVolume,
                pb.DeleteVolumeRequest(volume_id=item.resource_id),
            )
        assert not errors, "resource cleanup failed:\n" + "\n".join(errors)

    @staticmethod
    def _try(
        what: str, call: Callable[[Any], Any], request: Any, not_found_ok: bool = False
    ) -> list[str]:
        try:
            call(request)
        except grpc.RpcError as err:
            if not_found_ok and err.code() == StatusCode.NOT_FOUND:
                return []
            shown = " ".join(str(request).split())
            return [f"{what}({shown}) failed: {err.code().name}: {err.details()}"]
        return []
