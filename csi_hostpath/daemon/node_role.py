"""The node role, imported only where this process serves one (daemon/server.py): its context
made from the Config, the one place the node role's flags are read; its service; its servicer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.node import NodeServicer
from csi_hostpath.api.runtime.aio_server import AioServer
from csi_hostpath.core.model import PoolScope
from csi_hostpath.daemon.config import Config
from csi_hostpath.service.inflight import InFlight
from csi_hostpath.service.node import NodeService
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System

if TYPE_CHECKING:
    from csi_hostpath.service.node.self_publish import Stages


def node_context(config: Config, store: Store, system: System, layout: PoolLayout) -> NodeContext:
    """The node role's one read of the Config; its parts share what it carries."""
    local = config.pool_scope == PoolScope.LOCAL
    return NodeContext(
        node_id=config.node_id,
        store=store,
        system=system,
        layout=layout,
        inflight=InFlight(),
        state_dir=config.state_dir,
        pool_dir=config.pool_dir,
        topology={config.topology_key: config.node_id} if local else {},
        max_volumes_per_node=config.max_volumes_per_node,
        max_volume_size=config.max_volume_size,
        allow_inline_volumes=config.allow_inline_volumes,
        max_inline_size=config.max_inline_size,
        heartbeat_interval=config.heartbeat_interval,
        fence_interval=config.fence_interval,
        node_grace=config.node_grace,
        max_freeze_seconds=config.max_freeze_seconds,
    )


def node_service(config: Config, store: Store, system: System, layout: PoolLayout) -> NodeService:
    return NodeService(node_context(config, store, system, layout))


def add_node_servicer(server: AioServer, node: NodeService, stages: Stages | None) -> None:
    """The Node service; with --self-publish (no attach), its NodeStage and NodeUnstage take and
    give back the node's own publication in the controller's ledger, in this same process."""
    server.add_servicer(pb_grpc.add_NodeServicer_to_server, NodeServicer(node, stages))
