"""Build the driver (store, system layer, services, gRPC server) from a Config, and run it."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from grpc_health.v1 import health_pb2

from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.api.identity import IdentityServicer
from csi_hostpath.api.runtime.aio_server import AioServer, Health
from csi_hostpath.api.runtime.lanes import Lanes
from csi_hostpath.api.runtime.pipeline import Pipeline
from csi_hostpath.api.runtime.rpc_log import RpcLog
from csi_hostpath.daemon.config import Config
from csi_hostpath.daemon.endpoint import claim_endpoint
from csi_hostpath.daemon.stop_signals import stop_on_signals
from csi_hostpath.service.readiness import Readiness
from csi_hostpath.store.db import Store, open_store
from csi_hostpath.store.headroom import Headroom
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.store.private import private_state_dir
from csi_hostpath.system.base import System
from csi_hostpath.system.flock import hold_exclusive

if TYPE_CHECKING:
    # Each role's modules are imported where the process serves it (daemon/node_role.py,
    # daemon/controller_role.py), and the metrics with their address: a node plugin, which
    # runs on every node of a cluster, holds none of the controller's code
    # (tests/unit/test_role_imports.py).
    from csi_hostpath.api.runtime.copy_pool import CopyPool
    from csi_hostpath.daemon.controller_role import ControllerParts
    from csi_hostpath.daemon.status_http import LedgerView
    from csi_hostpath.service.controller import ControllerService, PublishLedger
    from csi_hostpath.service.metrics import Metrics
    from csi_hostpath.service.node import NodeService

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
    metrics: Metrics | None  # with --metrics-address only: nothing reads them without it
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
            from csi_hostpath.service.controller.open_pool import open_pool

            # Before any repair: the pool must be this database's, and the index whole again
            # (re-adopted from the files' identities), or a repair would act on a partial view.
            claim, _ = open_pool(store, layout, config.state_dir)
        if node is not None:
            node.reconcile()
        if ledger is not None:
            ledger.reconcile()
            ledger.import_events()

        metrics = _metrics(config, store, layout, system)
        started = threading.Event()
        # Every call's pipeline: its mount lookups share a read of this system's mount table, and
        # a teardown that finds the disk full is given the headroom back and run once more.
        pipeline = Pipeline(system, headroom)
        server = AioServer(
            Lanes(config.workers),
            RpcLog(metrics.observe if metrics is not None else None),
            pipeline,
        )
        _add_servicers(server, config, parts, node)
        # The node's system layer for its machine checks: a controller-only process has none.
        readiness = Readiness(
            db_path, config.state_dir, config.pool_dir, system if config.serves_node else None
        )
        identity = IdentityServicer(
            config.driver_name, config.serves_controller, config.pool_scope, readiness, started
        )
        server.add_servicer(pb_grpc.add_IdentityServicer_to_server, identity)
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
            copies=parts.copies if parts is not None else None,
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


def _node_service(
    config: Config, store: Store, system: System, layout: PoolLayout
) -> NodeService | None:
    if not config.serves_node:
        return None
    from csi_hostpath.daemon.node_role import node_service

    return node_service(config, store, system, layout)


def _controller_parts(
    config: Config, store: Store, system: System, layout: PoolLayout, node: NodeService | None
) -> ControllerParts | None:
    if not config.serves_controller:
        return None
    from csi_hostpath.daemon.controller_role import controller_parts

    return controller_parts(config, store, system, layout, node)


def _metrics(config: Config, store: Store, layout: PoolLayout, system: System) -> Metrics | None:
    """Prometheus's registry where an address serves it; without one, nothing would read it."""
    if not config.metrics_address:
        return None
    from csi_hostpath.service.metrics import StateScope, build_metrics

    scope = StateScope(
        controller=config.serves_controller,
        node_id=config.node_id if config.serves_node else None,
        node_grace=config.node_grace,
        node_lost_after=config.node_lost_after,
    )
    return build_metrics(scope, store, layout, system)


def _add_servicers(
    server: AioServer,
    config: Config,
    parts: ControllerParts | None,
    node: NodeService | None,
) -> None:
    """The Controller, GroupController and SnapshotMetadata services where this process is a
    controller, the Node service where it is a node."""
    own = None
    if parts is not None:
        from csi_hostpath.daemon.controller_role import add_controller_servicers

        add_controller_servicers(server, parts)
        if config.self_publish and node is not None:
            # NodeStage's own hold on the ledger, where one process is both roles.
            from csi_hostpath.service.node.self_publish import SelfPublish

            own = SelfPublish(node, parts.ledger, config.node_id)
    if node is not None:
        from csi_hostpath.daemon.node_role import add_node_servicer

        add_node_servicer(server, node, own)


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
    if driver.metrics is not None:
        from csi_hostpath.daemon.status_http import serve_status

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
    from csi_hostpath.service.ledger_view import ledger_view

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
