"""Long copies never starve the other RPCs, on a real driver with held copies.

Long copies never starve the other RPCs (api/runtime/copy_pool.py), on a real driver (a real
gRPC server on a temporary socket, real sparse files) whose copies are held until the test
releases them.

More snapshots than the driver has RPC workers copy at once; meanwhile Probe, ControllerPublish
and CreateVolume still answer, and every snapshot is made once the copies are released, by
callers that retry ABORTED with the same request as the CO does."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.system.base import System
from csi_hostpath.system.linux import linux_system
from tests.conftest import Client, in_process
from tests.real.test_freeze_real import HeldCopy
from tests.support import helpers as h

WORKERS = 4
COPIES = 6  # more than WORKERS
ANSWER = 10.0  # a deadline for the calls that must not wait behind the copies


@contextmanager
def held_copies(workdir: Path) -> Iterator[tuple[Client, HeldCopy]]:
    pools: list[HeldCopy] = []

    def held(pool_dir: Path) -> System:
        real = linux_system(pool_dir)
        pools.append(HeldCopy(real.pool))
        return dataclasses.replace(real, pool=pools[0])

    with in_process(workdir, "copies", "--workers", str(WORKERS), system=held) as client:
        try:
            yield client, pools[0]
        finally:
            pools[0].release.set()


def snapshot_like_the_co(client: Client, volume_id: str, name: str, out: list[object]) -> None:
    """CreateSnapshot, retried with the same request on ABORTED (the snapshotter's requeue)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            out.append(
                client.controller.CreateSnapshot(rq.create_snapshot(name, volume_id), timeout=60)
            )
            return
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.ABORTED or time.monotonic() > deadline:
                out.append(e)
                return
            time.sleep(0.2)


def test_slow_copies_never_starve_probe_or_publish(workdir: Path) -> None:
    with held_copies(workdir) as (client, pool):
        cap = h.mount_cap("ext4")
        sources = [h.create(client, f"src-{i}", cap, 16 * h.MiB) for i in range(COPIES)]
        other = h.create(client, "other", cap, 16 * h.MiB)
        results: list[list[object]] = [[] for _ in sources]
        callers = [
            threading.Thread(target=snapshot_like_the_co,
                             args=(client, v.volume_id, f"snap-{i}", results[i]))
            for i, v in enumerate(sources)
        ]  # fmt: skip
        for t in callers:
            t.start()
        assert pool.entered.wait(20), "no copy started"
        time.sleep(1.0)  # every CreateSnapshot has arrived and is copying or waiting

        probe = client.identity.Probe(pb.ProbeRequest(), timeout=ANSWER)
        assert probe.ready.value
        context = client.controller.ControllerPublishVolume(
            rq.controller_publish(other.volume_id, "node-a", cap), timeout=ANSWER
        ).publish_context
        assert context["generation"]
        h.create(client, "made-while-copying", cap, 16 * h.MiB)  # a quick call, answered too
        assert not any(results), "the copies are still held"

        pool.release.set()
        for t in callers:
            t.join(150)
        for i, out in enumerate(results):
            assert out and isinstance(out[0], pb.CreateSnapshotResponse), (i, out)
        snaps = client.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries
        assert sorted(s.snapshot.source_volume_id for s in snaps) == sorted(
            v.volume_id for v in sources
        ), "each snapshot made once"
