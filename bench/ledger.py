"""(d) The ledger RPCs (ControllerPublishVolume / ControllerUnpublishVolume, each a durable sqlite
commit plus an fsynced lease file) against the bare gRPC round trip of the same server.

The bare round trip is grpc.health.v1.Health/Check when the server serves it, else
Identity.GetPluginInfo (no I/O, no lock: the cost of the gRPC stack alone). Latencies interleave
the bare call with the ledger calls, so both see the same machine; throughput runs N clients, each
with its own connection and its own volumes (one volume's calls are serialised by the driver's
in-flight guard, so sharing volumes would measure ABORTED answers, not the ledger).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.harness import MiB, Stubs
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.client.csi_requests import block_cap

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
VOLUME_SIZE = 16 * MiB


def _identity(data: bytes) -> bytes:
    return data


def bare_call(stubs: Stubs) -> tuple[str, Callable[[], object]]:
    """The cheapest RPC the server answers: (its name, a callable that makes it)."""
    # An empty HealthCheckRequest is zero bytes on the wire, so no health stubs are needed.
    health = stubs.channel.unary_unary(
        HEALTH_CHECK, request_serializer=_identity, response_deserializer=_identity
    )
    try:
        health(b"", timeout=5)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
    else:
        return "grpc.health.v1.Health/Check", lambda: health(b"")
    request = pb.GetPluginInfoRequest()
    return "Identity.GetPluginInfo", lambda: stubs.identity.GetPluginInfo(request)


def _publish(stubs: Stubs, volume_id: str, node_id: str) -> None:
    stubs.controller.ControllerPublishVolume(rq.controller_publish(volume_id, node_id, block_cap()))


def _unpublish(stubs: Stubs, volume_id: str, node_id: str) -> None:
    stubs.controller.ControllerUnpublishVolume(rq.controller_unpublish(volume_id, node_id))


def _create_many(stubs: Stubs, prefix: str, count: int) -> list[str]:
    def create(index: int) -> str:
        response = stubs.controller.CreateVolume(
            rq.create_volume(f"{prefix}-{index}", block_cap(), VOLUME_SIZE)
        )
        return str(response.volume.volume_id)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(create, range(count)))


def _delete_many(stubs: Stubs, node_id: str, volume_ids: list[str]) -> None:
    def delete(volume_id: str) -> None:
        _unpublish(stubs, volume_id, node_id)
        stubs.controller.DeleteVolume(rq.delete_volume(volume_id))

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(delete, volume_ids))


@dataclass
class LatencyResult:
    bare_name: str
    bare: list[float]
    publish: list[float]
    unpublish: list[float]


def latencies(stubs: Stubs, node_id: str, rounds: int, warmup: int = 20) -> LatencyResult:
    """rounds of (bare, publish, bare, unpublish) on one volume, one client."""
    bare_name, bare = bare_call(stubs)
    (volume_id,) = _create_many(stubs, "ledger-latency", 1)
    result = LatencyResult(bare_name, [], [], [])
    try:
        for index in range(warmup + rounds):
            keep = index >= warmup
            for sink, call in (
                (result.bare, bare),
                (result.publish, lambda: _publish(stubs, volume_id, node_id)),
                (result.bare, bare),
                (result.unpublish, lambda: _unpublish(stubs, volume_id, node_id)),
            ):
                start = time.perf_counter()
                call()
                elapsed = time.perf_counter() - start
                if keep:
                    sink.append(elapsed)
    finally:
        _delete_many(stubs, node_id, [volume_id])
    return result


@dataclass
class Phase:
    calls: int
    seconds: float
    latencies: list[float]
    errors: list[str]

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0


def _phase(
    clients: list[Stubs], work: Callable[[int, Stubs], list[float]], errors: list[str]
) -> Phase:
    """Run work(client_index, stubs) on every client at once, started together."""
    barrier = threading.Barrier(len(clients) + 1)
    samples: list[float] = []
    lock = threading.Lock()

    def body(index: int) -> None:
        barrier.wait()
        try:
            mine = work(index, clients[index])
        except grpc.RpcError as exc:
            with lock:
                errors.append(f"client {index}: {exc.code().name}: {exc.details()}")
            return
        with lock:
            samples.extend(mine)

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        futures = [pool.submit(body, i) for i in range(len(clients))]
        barrier.wait()
        start = time.perf_counter()
        for future in futures:
            future.result()
        seconds = time.perf_counter() - start
    return Phase(len(samples), seconds, samples, errors)


@dataclass
class ThroughputResult:
    clients: int
    per_client: int
    bare_name: str
    bare: Phase
    publish: Phase
    unpublish: Phase


def throughput(socket: Path, node_id: str, clients: int, per_client: int) -> ThroughputResult:
    """clients concurrent clients: per_client bare calls each, then per_client publishes of
    distinct volumes each, then their unpublishes."""
    stubs = [Stubs(socket, private=True) for _ in range(clients)]
    for s in stubs:
        s.wait_ready()
    volumes: list[list[str]] = []
    try:
        bare_name, _ = bare_call(stubs[0])
        bare_calls = [bare_call(s)[1] for s in stubs]
        all_ids = _create_many(stubs[0], "ledger-load", clients * per_client)
        volumes = [all_ids[i * per_client : (i + 1) * per_client] for i in range(clients)]

        def timed_each(calls: list[Callable[[], object]]) -> list[float]:
            out = []
            for call in calls:
                start = time.perf_counter()
                call()
                out.append(time.perf_counter() - start)
            return out

        def bare_work(index: int, _stubs: Stubs) -> list[float]:
            return timed_each([bare_calls[index]] * per_client)

        def publish_work(index: int, s: Stubs) -> list[float]:
            return timed_each([functools.partial(_publish, s, v, node_id) for v in volumes[index]])

        def unpublish_work(index: int, s: Stubs) -> list[float]:
            return timed_each(
                [functools.partial(_unpublish, s, v, node_id) for v in volumes[index]]
            )

        bare = _phase(stubs, bare_work, [])
        published = _phase(stubs, publish_work, [])
        unpublished = _phase(stubs, unpublish_work, [])
    finally:
        _delete_many(stubs[0], node_id, [v for vs in volumes for v in vs])
        for s in stubs:
            s.close()
    return ThroughputResult(clients, per_client, bare_name, bare, published, unpublished)
