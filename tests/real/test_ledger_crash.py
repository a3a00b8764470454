"""kill -9 of the controller during a stream of concurrent publishes, then a restart."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from tests.support import helpers as h

NODES = [f"n{i}" for i in range(6)]


def test_acknowledged_publishes_survive_kill_9(spawn: Any, workdir: Path) -> None:
    pool = workdir / "pool"
    layout = PoolLayout(pool)
    layout.ensure()
    for node in NODES:
        layout.beat(node)  # the nodes are known to the controller through their heartbeats
    handle, client = spawn(
        "ctrl",
        "--mode",
        "controller",
        "--pool-scope",
        "shared",
        "--pool-dir",
        str(pool),
        node_id="controller",
    )
    cap = h.block_cap()
    volumes = [h.create(client, f"v{i}", cap, 4 * h.MiB).volume_id for i in range(40)]

    acknowledged: dict[tuple[str, str], str] = {}
    refused: set[tuple[str, str]] = set()
    in_flight_at_kill: set[tuple[str, str]] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            key = (rng.choice(volumes), rng.choice(NODES))
            try:
                ctx = h.publish(client, key[0], key[1], cap)
            except grpc.RpcError as e:
                with lock:
                    if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                        refused.add(key)
                    else:  # the kill: the outcome of this call is unknown to the client
                        in_flight_at_kill.add(key)
                        return
                continue
            with lock:
                acknowledged[key] = ctx["generation"]

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    handle.kill(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(30)
    client.close()
    assert len(acknowledged) >= 10, "the stream was running when the controller died"

    handle.start().close()  # the restart reconciles leases with the ledger
    store = Store(workdir / "ctrl-state" / "state.db")
    try:
        rows = {(p.volume_id, p.node_id): str(p.generation) for p in store.publications()}
    finally:
        store.close()
    for key, generation in acknowledged.items():
        assert rows.get(key) == generation, f"acknowledged publish {key} lost"
    unexplained = set(rows) - set(acknowledged) - in_flight_at_kill
    assert not unexplained, f"rows nobody was told about: {unexplained}"
    assert not (set(rows) & (refused - set(acknowledged) - in_flight_at_kill))
    per_volume: dict[str, int] = {}
    for vid, _ in rows:
        per_volume[vid] = per_volume.get(vid, 0) + 1
    assert max(per_volume.values()) == 1, "a single-node volume never has two holders"
    for vid in {v for v, _ in rows}:
        lease = layout.read_lease(vid)
        assert lease is not None
        assert lease.holders == {n: int(g) for (v, n), g in rows.items() if v == vid}
