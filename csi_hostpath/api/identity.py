from __future__ import annotations

import logging

import grpc
from google.protobuf import wrappers_pb2

from csi_hostpath import __version__
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.status import rpc
from csi_hostpath.config import Config, PoolScope
from csi_hostpath.core.errors import NotReady
from csi_hostpath.service import health
from csi_hostpath.store.db import Store

log = logging.getLogger(__name__)
Cap = pb.PluginCapability


class IdentityServicer(pb_grpc.IdentityServicer):
    def __init__(self, config: Config, store: Store) -> None:
        self.config = config
        self.store = store

    @rpc
    def GetPluginInfo(
        self, request: pb.GetPluginInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetPluginInfoResponse:
        return pb.GetPluginInfoResponse(name=self.config.driver_name, vendor_version=__version__)

    @rpc
    def GetPluginCapabilities(
        self, request: pb.GetPluginCapabilitiesRequest, context: grpc.ServicerContext
    ) -> pb.GetPluginCapabilitiesResponse:
        caps = []
        if self.config.serves_controller:
            caps.append(Cap(service=Cap.Service(type=Cap.Service.CONTROLLER_SERVICE)))
        if self.config.pool_scope == PoolScope.LOCAL:
            caps.append(Cap(service=Cap.Service(type=Cap.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)))
        # Filesystems grow while mounted (xfs_growfs, resize2fs) and loop devices take a new
        # capacity live, so expansion needs no unpublish.
        caps.append(Cap(volume_expansion=Cap.VolumeExpansion(type=Cap.VolumeExpansion.ONLINE)))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    @rpc
    def Probe(self, request: pb.ProbeRequest, context: grpc.ServicerContext) -> pb.ProbeResponse:
        found = health.problems(self.config, self.store)
        if found:
            log.warning("not ready: %s", "; ".join(found))
            raise NotReady("not ready: " + "; ".join(found))
        return pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=True))
