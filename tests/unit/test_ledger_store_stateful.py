"""A stateful hypothesis test of the ledger on the real sqlite store.

Three nodes race to publish, unpublish and force-detach, each rule firing its calls from several
threads at once and through two connections (a controller and a `ledger` command share the file).
Between rules the store is sometimes closed and reopened. Invariants: a single-node volume never
has two holders, and every acknowledged publish is still there after a reopen, until an
acknowledged unpublish or force-detach removed it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from csi_hostpath.core import errors, ledger_rules
from csi_hostpath.core.access import SINGLE_NODE_MODES
from csi_hostpath.core.model import AccessMode, AccessType, Capability, Publication, Volume
from csi_hostpath.store.db import Store

NODES = ("node-a", "node-b", "node-c")
VOLUMES = {
    "vol-" + "1" * 32: AccessMode.SINGLE_NODE_WRITER,
    "vol-" + "2" * 32: AccessMode.SINGLE_NODE_SINGLE_WRITER,
    "vol-" + "3" * 32: AccessMode.MULTI_NODE_READER_ONLY,
}


def _publish(store: Store, volume_id: str, node: str) -> Publication | None:
    cap = Capability(AccessType.MOUNT, VOLUMES[volume_id])

    def decide(
        volume: Volume, holders: list[Publication], count: int, generation: int
    ) -> ledger_rules.PublishDecision:
        return ledger_rules.decide_publish(
            volume, node, cap, False, holders, count, 0, generation, time.time()
        )

    try:
        return store.publish_atomically(volume_id, node, decide, actor="test").publication
    except errors.PublishedElsewhere:
        return None


# The rules are what this test checks, not durability: on tmpfs an fsync costs nothing, and the
# 1500 commits of a run no longer wait on a shared disk.
_FAST_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="csihp-ledger-", dir=_FAST_DIR))
        self.path = self.dir / "state.db"
        self.controller = Store(self.path)
        self.tool = Store(self.path)  # a second connection, as the ledger CLI opens
        for vid, mode in VOLUMES.items():
            self.controller.insert_volume_unless_named(
                Volume(vid, vid, 1 << 30, (Capability(AccessType.MOUNT, mode),), "ext4")
            )
        self.acknowledged: dict[tuple[str, str], int] = {}  # (volume, node) -> generation
        self.lock = threading.Lock()

    def teardown(self) -> None:
        self.controller.close()
        self.tool.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        volume_id=st.sampled_from(list(VOLUMES)),
        nodes=st.lists(st.sampled_from(NODES), min_size=1, max_size=3),
    )
    def publish_concurrently(self, volume_id: str, nodes: list[str]) -> None:
        def worker(i: int, node: str) -> None:
            store = self.controller if i % 2 == 0 else self.tool
            p = _publish(store, volume_id, node)
            if p is not None:
                with self.lock:
                    known = self.acknowledged.get((volume_id, node))
                    assert known is None or known == p.generation, "a repeat keeps its token"
                    self.acknowledged[(volume_id, node)] = p.generation

        threads = [threading.Thread(target=worker, args=(i, n)) for i, n in enumerate(nodes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    @rule(volume_id=st.sampled_from(list(VOLUMES)), node=st.sampled_from([*NODES, ""]))
    def unpublish(self, volume_id: str, node: str) -> None:
        removed = self.controller.unpublish(volume_id, node, actor="test")
        for p in removed:
            self.acknowledged.pop((p.volume_id, p.node_id), None)
        if node:
            assert (volume_id, node) not in self.acknowledged

    @rule(volume_id=st.sampled_from(list(VOLUMES)), node=st.sampled_from(NODES))
    def force_detach(self, volume_id: str, node: str) -> None:
        def check(p: Publication) -> None:
            ledger_rules.decide_force_detach(p, None, 60.0, False)

        revoked = self.tool.force_detach(volume_id, node, check, "test", "hypothesis")
        if revoked is not None:
            assert self.acknowledged.pop((volume_id, node)) == revoked.generation
        assert (volume_id, node) not in self.acknowledged

    @rule()
    def restart_the_store(self) -> None:
        self.controller.close()
        self.controller = Store(self.path)

    @invariant()
    def single_node_volumes_have_one_holder(self) -> None:
        for vid, mode in VOLUMES.items():
            holders = self.controller.publications(volume_id=vid)
            if mode in SINGLE_NODE_MODES:
                assert len(holders) <= 1, holders

    @invariant()
    def acknowledged_publishes_are_durable(self) -> None:
        rows = {(p.volume_id, p.node_id): p.generation for p in self.controller.publications()}
        assert rows == self.acknowledged

    @invariant()
    def generations_only_grow(self) -> None:
        for p in self.controller.publications():
            assert p.generation <= self.controller.generation(p.volume_id)


LedgerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestLedgerStore = LedgerMachine.TestCase
