"""Build the driver (store, system layer, services, gRPC server) from a Config, and run it."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from grpc_health.v1 import health_pb2

from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.controller import ControllerServicer
from csi_hostpath.api.group_controller import GroupControllerServicer
from csi_hostpath.api.identity import IdentityServicer
from csi_hostpath.api.node import NodeServicer
from csi_hostpath.api.runtime.aio_server import AioServer, Health
from csi_hostpath.api.runtime.copy_pool import CopyPool
from csi_hostpath.api.runtime.lanes import Lanes
from csi_hostpath.api.runtime.pipeline import Pipeline
from csi_hostpath.api.runtime.rpc_log import RpcLog
from csi_hostpath.api.snapshot_metadata import SnapshotMetadataServicer
from csi_hostpath.daemon.config import Config
from csi_hostpath.daemon.endpoint import claim_endpoint
from csi_hostpath.daemon.status_http import LedgerView, serve_status
from csi_hostpath.daemon.stop_signals import stop_on_signals
from csi_hostpath.service.controller import ControllerService, PublishLedger
from csi_hostpath.service.controller.controller_context import ControllerContext
from csi_hostpath.service.controller.modify import ModifyService
from csi_hostpath.service.controller.open_pool import open_pool
from csi_hostpath.service.controller.reentrant_freeze import ReentrantFreeze
from csi_hostpath.service.controller.remote_freeze import RemoteFreeze
from csi_hostpath.service.controller.snapshot_metadata_service import SnapshotMetadataService
from csi_hostpath.service.ledger_view import ledger_view
from csi_hostpath.service.metrics import Metrics, build_metrics
from csi_hostpath.service.node import NodeService
from csi_hostpath.service.node.node_context import NodeContext
from csi_hostpath.service.node.self_publish import SelfPublish
from csi_hostpath.service.readiness import Readiness
from csi_hostpath.store.db import Store, open_store
from csi_hostpath.store.freeze_channel import FreezeChannel
from csi_hostpath.store.headroom import Headroom
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.store.private import private_state_dir
from csi_hostpath.system.base import System
from csi_hostpath.system.flock import hold_exclusive

log = logging.getLogger(__name__)


class StateDirLocked(RuntimeError):
    pass


def lock_state_dir(state_dir: Path) -> IO[bytes]:
    """Hold an exclusive flock for the life of the process: two daemons on one state directory
    would each believe their store is the truth."""
    private_state_dir(state_dir)  # 0700: the ledger is root's alone
    handle = hold_exclusive(state_dir / ".lock")  # held open for the process's life
    if handle is None:
        raise StateDirLocked(
            f"another csi-hostpath daemon holds {state_dir}; give each daemon its own --state-dir"
        )
    return handle


def parse_listen_address(address: str) -> tuple[str, int]:
    """ "HOST:PORT" or ":PORT" (all interfaces)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--metrics-address must be HOST:PORT or :PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass
class Driver:
    config: Config
    server: AioServer
    store: Store
    layout: PoolLayout
    controller: ControllerService | None
    ledger: PublishLedger | None  # the controller's, with it
    node: NodeService | None
    lock_handle: IO[bytes]
    metrics: Metrics
    health: Health
    started: threading.Event
    readiness: Readiness
    metrics_server: Any = None
    copies: CopyPool | None = None
    pool_claim: Any = None  # store.backing.owner.PoolClaim, held while a controller serves
    headroom: Headroom | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def stop(self, grace: float = 5.0) -> None:
        self._stop.set()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace)  # the executors too: queued calls dropped, running ones awaited
        if self.copies is not None:
            self.copies.shutdown()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        if self.node is not None:
            self.node.stop_background()
        for t in self._threads:
            t.join(timeout=5)
        self.store.close()
        if self.pool_claim is not None:
            self.pool_claim.release()
        self.lock_handle.close()
        self.config.socket_path.unlink(missing_ok=True)

    def check_health(self) -> None:
        problems = self.readiness.problems()
        status = health_pb2.HealthCheckResponse.SERVING
        if problems:
            log.warning("not ready: %s", "; ".join(problems))
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)

    def _loop(self) -> None:
        while not self._stop.wait(self.config.heartbeat_interval):
            try:
                if self.ledger is not None:
                    self.ledger.import_events()
                if self.headroom is not None:
                    self.headroom.ensure()  # taken back once a full disk has room again
                self.check_health()
            except Exception:
                log.exception("periodic driver pass failed; trying again")


@dataclass(frozen=True, slots=True)
class ControllerParts:
    """The controller role, where this process is a controller: its context, the service, the
    ledger, and the freeze its copies run under."""

    ctx: ControllerContext
    service: ControllerService
    ledger: PublishLedger
    freeze: ReentrantFreeze


def _node_service(
    config: Config, store: Store, system: System, layout: PoolLayout
) -> NodeService | None:
    if not config.serves_node:
        return None
    # The node role's one read of the Config; its parts share what it carries.
    return NodeService(NodeContext.from_config(config, store, system, layout))


def _controller_parts(
    config: Config, store: Store, system: System, layout: PoolLayout, node: NodeService | None
) -> ControllerParts | None:
    if not config.serves_controller:
        return None
    # The controller role's one read of the Config; its parts share what it carries.
    ctx = ControllerContext.from_config(config, store, system, layout)
    remote = RemoteFreeze(ctx, FreezeChannel(config.pool_dir))
    remote.withdraw_left_over()
    # The volume frozen wherever it may be mounted: on this process's own node in-process, and
    # on every other node the lease names, through the pool. Re-entrant, so a group snapshot's
    # freeze of every member covers each member's cut.
    freeze = ReentrantFreeze(remote) if node is None else ReentrantFreeze(node.frozen, remote)
    service = ControllerService(ctx, freeze)
    return ControllerParts(ctx, service, PublishLedger.from_context(ctx), freeze)


def build_driver(config: Config, system: System | None = None) -> Driver:
    lock = lock_state_dir(config.state_dir)
    claim = None
    store: Store | None = None
    server: AioServer | None = None
    try:
        layout = PoolLayout(config.pool_dir)
        layout.ensure()
        db_path = config.state_dir / "state.db"
        store = open_store(db_path, config.pool_dir)
        headroom = Headroom(config.state_dir)
        headroom.ensure()
        if system is None:
            from csi_hostpath.system.linux import linux_system

            system = linux_system(config.pool_dir)
        node = _node_service(config, store, system, layout)
        parts = _controller_parts(config, store, system, layout, node)
        controller = parts.service if parts is not None else None
        ledger = parts.ledger if parts is not None else None
        if controller is not None:
            # Before any repair: the pool must be this database's, and the index whole again
            # (re-adopted from the files' identities), or a repair would act on a partial view.
            claim, _ = open_pool(store, layout, config.state_dir)
        if node is not None:
            node.reconcile()
        if ledger is not None:
            ledger.reconcile()
            ledger.import_events()

        metrics = build_metrics(config, store, layout, system)
        started = threading.Event()
        # Every call's pipeline: its mount lookups share a read of this system's mount table, and
        # a teardown that finds the disk full is given the headroom back and run once more.
        pipeline = Pipeline(system, headroom)
        server = AioServer(Lanes(config.workers), RpcLog(metrics.observe), pipeline)
        copies = CopyPool(config.workers)  # snapshot and clone copies, apart from the RPC workers
        _add_servicers(server, config, parts, node, copies)
        # The node's system layer for its machine checks; Readiness ignores it in a
        # controller-only process.
        readiness = Readiness(config, db_path, system)
        server.add_servicer(
            pb_grpc.add_IdentityServicer_to_server, IdentityServicer(config, readiness, started)
        )
        health_servicer = Health(server)
        health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)  # until start()
        _bind(server, config.socket_path)
        driver = Driver(
            config,
            server,
            store,
            layout,
            controller,
            ledger,
            node,
            lock,
            metrics,
            health_servicer,
            started,
            readiness,
            headroom=headroom,
            copies=copies,
        )
        driver.pool_claim = claim
    except BaseException:
        if server is not None:
            server.stop(grace=0)
        if claim is not None:
            claim.release()
        if store is not None:
            store.close()
        lock.close()
        raise
    return driver


def _add_servicers(
    server: AioServer,
    config: Config,
    parts: ControllerParts | None,
    node: NodeService | None,
    copies: CopyPool,
) -> None:
    """The Controller, GroupController and SnapshotMetadata services where this process is a
    controller, the Node service where it is a node."""
    if parts is not None:
        modify = ModifyService(parts.ctx)
        server.add_servicer(
            pb_grpc.add_ControllerServicer_to_server,
            ControllerServicer(parts.service, parts.ledger, modify, copies),
        )
        server.add_servicer(
            pb_grpc.add_GroupControllerServicer_to_server,
            GroupControllerServicer(parts.service, copies),
        )
        server.add_servicer(
            pb_grpc.add_SnapshotMetadataServicer_to_server,
            SnapshotMetadataServicer(SnapshotMetadataService(parts.ctx)),
        )
    if node is not None:
        # With --self-publish (no attach), NodeStage and NodeUnstage take and give back the
        # node's own publication in the controller's ledger, in this same process.
        stages = None
        if parts is not None and config.self_publish:
            stages = SelfPublish(node, parts.ledger, config.node_id)
        server.add_servicer(pb_grpc.add_NodeServicer_to_server, NodeServicer(node, stages))


def _bind(server: AioServer, socket_path: Path) -> None:
    claim_endpoint(socket_path)  # only a stale socket is removed; anything else is refused
    old_umask = os.umask(0o177)  # the socket is born 0600: only root talks to a storage driver
    try:
        server.add_insecure_port(f"unix://{socket_path}")
    finally:
        os.umask(old_umask)


def start(driver: Driver) -> None:
    driver.server.start()
    os.chmod(driver.config.socket_path, 0o600)
    if driver.node is not None:
        driver.node.start_background()
    t = threading.Thread(target=driver._loop, name="driver-loop", daemon=True)
    t.start()
    driver._threads.append(t)
    if driver.config.metrics_address:
        host, port = parse_listen_address(driver.config.metrics_address)
        driver.metrics_server = serve_status(
            host, port, driver.metrics.registry, _ledger_view_of(driver)
        )
        log.info("metrics on http://%s:%d/metrics", host, port)
    driver.started.set()  # Probe answered ready=false, and health NOT_SERVING, until here
    driver.check_health()
    log.info(
        "serving %s (%s mode, node %s) on %s; state in %s, pool in %s (%s scope)",
        driver.config.driver_name,
        driver.config.mode.value,
        driver.config.node_id,
        driver.config.socket_path,
        driver.config.state_dir,
        driver.config.pool_dir,
        driver.config.pool_scope.value,
    )


def _ledger_view_of(driver: Driver) -> LedgerView | None:
    """The ledger's read-only view of one volume, where this process holds a ledger and
    --ledger-view asks for it."""
    if not driver.config.ledger_view or driver.controller is None:
        return None
    store, layout, grace = driver.store, driver.layout, driver.config.node_grace
    return lambda volume_id: ledger_view(store, layout, volume_id, grace)


def serve(config: Config) -> int:
    driver = build_driver(config)
    start(driver)
    stopping = threading.Event()
    stop_on_signals(stopping, log, "stopping gracefully")
    while not stopping.wait(1.0):
        pass
    driver.stop()
    log.info("stopped")
    return 0
