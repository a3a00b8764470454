"""Prometheus metrics. RPC counts and latencies are recorded as calls finish; everything that
describes state (publications, stale holders, loop devices, pool space) is computed at scrape
time from the store, the pool and the kernel, so it can never drift from the truth."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from csi_hostpath.core.naming import loop_tag_prefix
from csi_hostpath.service.lost_volumes import lost_volumes
from csi_hostpath.store.backing.adopt_pool import quarantined_files
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System

PREFIX = "csi_hostpath"


@dataclass
class Metrics:
    registry: CollectorRegistry
    rpc_total: Counter
    rpc_seconds: Histogram
    rpc_queued_seconds: Histogram

    def observe(self, method: str, code: str, seconds: float, queued: float) -> None:
        """seconds: from the request's arrival to the answer; queued: the part of it spent
        waiting for an executor thread."""
        self.rpc_total.labels(method=method, code=code).inc()
        self.rpc_seconds.labels(method=method).observe(seconds)
        self.rpc_queued_seconds.labels(method=method).observe(queued)


@dataclass(frozen=True, slots=True)
class StateScope:
    """What the state gauges read of the daemon's flags: the roles this process serves, and the
    ages past which a node counts as gone, then lost."""

    controller: bool  # the ledger's gauges and the audit counters
    node_id: str | None  # the node whose loop devices are counted; None: no node role here
    node_grace: float
    node_lost_after: float


class StateCollector(Collector):
    def __init__(self, scope: StateScope, store: Store, layout: PoolLayout, system: System) -> None:
        self.scope = scope
        self.store = store
        self.layout = layout
        self.system = system

    def collect(self) -> Iterator[Metric]:
        if self.scope.controller:
            yield from self._controller()
        if self.scope.node_id is not None:
            devices = self.system.loop.list(loop_tag_prefix(self.scope.node_id))
            g = GaugeMetricFamily(
                f"{PREFIX}_loop_devices_attached", "Loop devices this node plugin has attached"
            )
            g.add_metric([], len(devices))
            yield g
        yield from self._pool()

    def _controller(self) -> Iterator[Metric]:
        publications = self.store.publications()
        by_mode = GaugeMetricFamily(
            f"{PREFIX}_publications", "Ledger publications by access mode", labels=["access_mode"]
        )
        counts: dict[str, int] = {}
        for p in publications:
            counts[p.access_mode.name] = counts.get(p.access_mode.name, 0) + 1
        for mode, n in sorted(counts.items()):
            by_mode.add_metric([mode], n)
        yield by_mode
        now = time.time()
        beats = {b.node_id: b for b in self.layout.heartbeats()}
        stale = sum(
            1
            for p in publications
            if p.node_id not in beats or beats[p.node_id].age(now) >= self.scope.node_grace
        )
        g = GaugeMetricFamily(
            f"{PREFIX}_stale_publications",
            "Publications held by nodes whose heartbeat is older than the grace period: a volume "
            "stuck on a node that may be gone (waiting is safe; force-detach is a decision)",
        )
        g.add_metric([], stale)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_lost_volumes",
            "Volumes whose node is lost (forgotten by an operator, or silent past "
            "--node-lost-after): their data was on that node only",
        )
        g.add_metric([], len(lost_volumes(self.store, self.layout, self.scope.node_lost_after)))
        yield g
        audit = self.store.audit_counts()
        for action, name, text in (
            ("force-detach", "force_detaches", "Force-detaches recorded in the audit trail"),
            (
                "revoke",
                "revocations",
                "ControllerUnpublishVolume calls with no NodeUnstage before them (Kubernetes' "
                "force-detach: the out-of-service taint, or 6 minutes on an unhealthy node)",
            ),
            ("fenced", "fenced_volumes", "Volumes nodes fenced after their hold was revoked"),
        ):
            c = CounterMetricFamily(f"{PREFIX}_{name}", text)
            c.add_metric([], audit.get(action, 0))
            yield c

    def _pool(self) -> Iterator[Metric]:
        free = self.system.pool.free_bytes()
        allocated = sum(
            self.system.pool.allocated(p) for p in self.layout.volumes.glob("vol-*.img")
        )
        for name, value, text in (
            ("pool_free_bytes", free, "Free space in the pool filesystem"),
            ("pool_allocated_bytes", allocated, "Disk really used by the volumes in the pool"),
            (
                "quarantined_files",
                len(quarantined_files(self.layout)),
                "Files in POOL/quarantine that no record and no identity claimed: kept, never "
                "deleted, for an operator to look at (csi-hostpath doctor lists them)",
            ),
        ):
            g = GaugeMetricFamily(f"{PREFIX}_{name}", text)
            g.add_metric([], value)
            yield g


def _by_method(registry: CollectorRegistry, name: str, description: str) -> Histogram:
    return Histogram(
        f"{PREFIX}_{name}",
        description,
        ["method"],
        registry=registry,
        buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    )


def build_metrics(scope: StateScope, store: Store, layout: PoolLayout, system: System) -> Metrics:
    registry = CollectorRegistry()
    rpc_total = Counter(
        f"{PREFIX}_rpc",
        "CSI calls by method and status code",
        ["method", "code"],
        registry=registry,
    )
    rpc_seconds = _by_method(registry, "rpc_duration_seconds", "CSI call latency by method")
    rpc_queued_seconds = _by_method(
        registry, "rpc_queued_seconds", "Time a CSI call waited for an executor thread, by method"
    )
    registry.register(StateCollector(scope, store, layout, system))
    return Metrics(registry, rpc_total, rpc_seconds, rpc_queued_seconds)
