from __future__ import annotations

import threading

import grpc
from google.protobuf import wrappers_pb2

from csi_hostpath import __version__
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api._log import log
from csi_hostpath.core.model import PoolScope
from csi_hostpath.service.readiness import Readiness

Cap = pb.PluginCapability


class IdentityServicer(pb_grpc.IdentityServicer):
    def __init__(
        self,
        driver_name: str,
        serves_controller: bool,
        pool_scope: PoolScope,
        readiness: Readiness,
        started: threading.Event,
    ) -> None:
        self.driver_name = driver_name
        self.serves_controller = serves_controller  # the Controller service's capabilities
        self.pool_scope = pool_scope
        self.readiness = readiness  # the store's, the pool's and the node's machine checks
        self.started = started  # set once the server, reconcile and background loops run

    def GetPluginInfo(
        self, request: pb.GetPluginInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetPluginInfoResponse:
        return pb.GetPluginInfoResponse(name=self.driver_name, vendor_version=__version__)

    def GetPluginCapabilities(
        self, request: pb.GetPluginCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.GetPluginCapabilitiesResponse:
        caps = []
        if self.serves_controller:
            caps.append(Cap(service=Cap.Service(type=Cap.Service.CONTROLLER_SERVICE)))
            caps.append(Cap(service=Cap.Service(type=Cap.Service.GROUP_CONTROLLER_SERVICE)))
            caps.append(Cap(service=Cap.Service(type=Cap.Service.SNAPSHOT_METADATA_SERVICE)))
        if self.pool_scope == PoolScope.LOCAL:
            caps.append(Cap(service=Cap.Service(type=Cap.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)))
            # A local pool's snapshots restore on its node only (their accessible_topology).
            caps.append(
                Cap(service=Cap.Service(type=Cap.Service.SNAPSHOT_ACCESSIBILITY_CONSTRAINTS))
            )
        # Filesystems grow while mounted (xfs_growfs, resize2fs) and loop devices take a new
        # capacity live, so expansion needs no unpublish.
        caps.append(Cap(volume_expansion=Cap.VolumeExpansion(type=Cap.VolumeExpansion.ONLINE)))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    def Probe(self, request: pb.ProbeRequest, context: grpc.ServicerContext) -> pb.ProbeResponse:
        # ready=false, never an error: csi-lib-utils' ProbeForever (used by every sidecar at
        # start) waits on ready=false but exits on any code other than DEADLINE_EXCEEDED, so an
        # error here crash-loops the sidecars while the driver starts.
        if not self.started.is_set():
            log.info("not ready: the driver is still starting")
            return pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=False))
        found = self.readiness.problems()
        if found:
            log.warning("not ready: %s", "; ".join(found))
        return pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=not found))
