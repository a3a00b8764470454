"""The controller role, imported only where this process serves one (daemon/server.py): its
context made from the Config, the one place the controller role's flags are read; its service,
ledger and freeze; and its servicers. A node plugin never loads these modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.controller import ControllerServicer
from csi_hostpath.api.group_controller import GroupControllerServicer
from csi_hostpath.api.runtime.aio_server import AioServer
from csi_hostpath.api.runtime.copy_pool import CopyPool
from csi_hostpath.api.snapshot_metadata import SnapshotMetadataServicer
from csi_hostpath.daemon.config import Config
from csi_hostpath.service.controller import ControllerService, PublishLedger
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.controller.modify import ModifyService
from csi_hostpath.service.controller.reentrant_freeze import ReentrantFreeze
from csi_hostpath.service.controller.remote_freeze import RemoteFreeze
from csi_hostpath.service.controller.snapshot_metadata_service import SnapshotMetadataService
from csi_hostpath.service.inflight import InFlight
from csi_hostpath.store.db import Store
from csi_hostpath.store.freeze_channel import FreezeChannel
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System

if TYPE_CHECKING:
    from csi_hostpath.service.node import NodeService


def controller_context(
    config: Config, store: Store, system: System, layout: PoolLayout
) -> ControllerContext:
    """The controller role's one read of the Config; its parts share what it carries."""
    return ControllerContext(
        node_id=config.node_id,
        store=store,
        system=system,
        layout=layout,
        inflight=InFlight(),
        pool_scope=config.pool_scope,
        topology_key=config.topology_key,
        own_node=config.node_id if config.serves_node else None,
        max_volume_size=config.max_volume_size,
        max_volumes_per_node=config.max_volumes_per_node,
        overcommit_ratio=config.overcommit_ratio,
        node_grace=config.node_grace,
        node_lost_after=config.node_lost_after,
        max_freeze_seconds=config.max_freeze_seconds,
    )


@dataclass(frozen=True, slots=True)
class ControllerParts:
    """The controller role, where this process is a controller: its context, the service, the
    ledger, the freeze its copies run under, and the pool its copies run on."""

    ctx: ControllerContext
    service: ControllerService
    ledger: PublishLedger
    freeze: ReentrantFreeze
    copies: CopyPool


def controller_parts(
    config: Config, store: Store, system: System, layout: PoolLayout, node: NodeService | None
) -> ControllerParts:
    ctx = controller_context(config, store, system, layout)
    remote = RemoteFreeze(ctx, FreezeChannel(config.pool_dir))
    remote.withdraw_left_over()
    # The volume frozen wherever it may be mounted: on this process's own node in-process, and
    # on every other node the lease names, through the pool. Re-entrant, so a group snapshot's
    # freeze of every member covers each member's cut.
    freeze = ReentrantFreeze(remote) if node is None else ReentrantFreeze(node.frozen, remote)
    service = ControllerService(ctx, freeze)
    # Snapshot and clone copies, apart from the RPC workers.
    copies = CopyPool(config.workers)
    return ControllerParts(ctx, service, PublishLedger.from_context(ctx), freeze, copies)


def add_controller_servicers(server: AioServer, parts: ControllerParts) -> None:
    """The Controller, GroupController and SnapshotMetadata services."""
    modify = ModifyService(parts.ctx)
    server.add_servicer(
        pb_grpc.add_ControllerServicer_to_server,
        ControllerServicer(parts.service, parts.ledger, modify, parts.copies),
    )
    server.add_servicer(
        pb_grpc.add_GroupControllerServicer_to_server,
        GroupControllerServicer(parts.service, parts.copies),
    )
    server.add_servicer(
        pb_grpc.add_SnapshotMetadataServicer_to_server,
        SnapshotMetadataServicer(SnapshotMetadataService(parts.ctx)),
    )
