"""What a chaos run (test_chaos.py) has made and must still hold, and the checks of it.

ChaosRun keeps the acknowledged volumes and snapshots (in the pools), the long-lived pods and
their data, and the counts the run reports. Its checks run right after every restart and after
every lifecycle: every plugin ready, no acknowledged file lost, nothing left frozen, never two
holders of one single-node volume, no leaked loop device or stale mount, the resident's data
intact.
"""

from __future__ import annotations

import glob
import hashlib
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.chaos_snap import WRITABLE_WITHIN, Pool, SnapNode
from tests.e2e.harness import PV, Cluster, Kubelet, Pod
from tests.e2e.node_runtime import Plugin
from tests.support.kernel import loops_backed_under, mounts_under
from tests.support.processes import wait_for

NODES = ("node-a", "node-b")
SNAP_NODE = "node-c"
DATA_BYTES = 256 * 1024


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def backing_files(root: Path) -> list[str]:
    """The backing file of every configured loop device whose file lies under root."""
    found = []
    for entry in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            path = Path(entry).read_text().strip()
        except OSError:
            continue  # detached while we looked
        if path.startswith(f"{root}/"):
            found.append(path)
    return found


@dataclass
class ChaosRun:
    """The cluster and node-c under chaos, what they hold, and the counts of the run."""

    cluster: Cluster
    snap: SnapNode
    rng: random.Random
    workdir: Path
    pool: Pool  # the split cluster's
    history: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)
    losses: Counter[str] = field(default_factory=Counter)  # "victim empty" -> count
    kills_inside: int = 0
    files_lost: int = 0
    left_frozen: int = 0
    durations: dict[str, float] = field(default_factory=dict)  # step kind -> seconds (EWMA)
    # The long-lived pod on node-a: its volume stays staged and published through every kill.
    resident: PV | None = None
    resident_pod: Pod = field(default_factory=lambda: Pod("resident"))
    resident_digest: str = ""
    keeper: str = ""  # a snapshot of the resident's volume, kept to the end
    frozen_at_restart: list[str] = field(default_factory=list)
    # The moving pod's volume while it is mounted on its first node: probed for a freeze too.
    moving: tuple[Kubelet, Path] | None = None

    @property
    def live(self) -> dict[str, str]:
        return self.pool.volumes

    @property
    def deleted(self) -> set[str]:
        return self.pool.deleted

    def plugin(self, name: str) -> Plugin:
        if name == "controller":
            return self.cluster.controller
        if name == SNAP_NODE:
            return self.snap.plugin
        return self.cluster.nodes[name].plugin

    def processes(self) -> list[str]:
        return ["controller", *NODES, SNAP_NODE]

    def restart_all(self) -> None:
        for plugin in self.cluster.plugins():
            plugin.ensure_running()
            ready = plugin.call("identity", "Probe", pb.ProbeRequest())
            assert ready.ready.value, f"{plugin.name} is not ready after its restart"

    def check_records(
        self, i: int, ledger: bool = True
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """No acknowledged volume lost, no deleted one back, at most one holder each (as
        ListVolumes says, and as `ledger list` says unless ledger is False: it costs a
        process)."""
        c = self.cluster
        listed = c.list_volumes()
        lost = set(self.live) - set(listed)
        assert not lost, f"lifecycle {i}: acknowledged volumes no longer listed: {lost}"
        assert not self.deleted & set(listed), f"lifecycle {i}: deleted volumes listed"
        holders = c.ledger_holders() if ledger else {}
        for vid, nodes in [*listed.items(), *holders.items()]:
            assert len(nodes) <= 1, f"lifecycle {i}: {vid} is held by {nodes}"
        # And in the kernel: no backing file behind two loop devices (two nodes at once).
        attached = Counter(backing_files(self.workdir))
        twice = [f for f, n in attached.items() if n > 1]
        assert not twice, f"lifecycle {i}: attached more than once: {twice}"
        return listed, holders

    def frozen(self) -> list[str]:
        """The long-lived pods' volumes that don't take a write within WRITABLE_WITHIN s."""
        assert self.resident is not None
        candidates: list[tuple[Kubelet, Path]] = [
            (self.cluster.kubelet("node-a"),
             self.cluster.kubelet("node-a").target_path(self.resident_pod, self.resident)),
            (self.snap.kubelet, self.snap.paths()[1]),
        ]  # fmt: skip
        if self.moving is not None:
            candidates.append(self.moving)
        return [str(p) for k, p in candidates if not k.writable(p, WRITABLE_WITHIN)]

    def probe_after_restart(self) -> None:
        """Right after a restart, before the step's retry can thaw anything by freezing again
        (FIFREEZE's EBUSY path): the start alone must have left nothing frozen."""
        self.frozen_at_restart += self.frozen()

    def check_files_and_freezes(self, i: int) -> None:
        """No acknowledged file lost in either pool; nothing left frozen, no freeze record."""
        lost = self.pool.lost(self.cluster.controller) + self.snap.pool.lost(self.snap.plugin)
        frozen, self.frozen_at_restart = self.frozen_at_restart + self.frozen(), []
        self.files_lost += len(lost)
        self.left_frozen += len(frozen)
        assert not lost, f"lifecycle {i}: files lost: {lost}"
        assert not frozen, f"lifecycle {i}: left frozen: {frozen}"
        records = self.snap.freeze_records()
        assert not records, f"lifecycle {i}: freeze records left: {records}"

    def check_invariants(self, i: int) -> None:
        c = self.cluster
        assert self.resident is not None
        listed, holders = self.check_records(i)
        assert holders == {self.resident.handle: ["node-a"]}, holders
        assert listed[self.resident.handle] == ["node-a"]

        self.check_files_and_freezes(i)
        # Only the long-lived pods' volumes are attached: two loop devices. A device released
        # while still open (autoclear) can take a moment to go.
        wait_for(
            lambda: len(loops_backed_under(self.workdir)) == 2,
            10,
            f"only the long-lived pods' loop devices after lifecycle {i}: "
            f"{loops_backed_under(self.workdir)}",
        )
        a, b = c.kubelet("node-a"), c.kubelet("node-b")
        expected = {
            str(a.staging_path(self.resident)),
            str(a.target_path(self.resident_pod, self.resident)),
        }
        assert set(a.stale_mounts()) == expected, f"after lifecycle {i}: {a.stale_mounts()}"
        assert not b.stale_mounts(), f"after lifecycle {i}: node-b has {b.stale_mounts()}"
        snap_mounts = set(self.snap.kubelet.stale_mounts())
        expected_c = {str(p) for p in self.snap.paths()}
        assert snap_mounts == expected_c, f"after lifecycle {i}: node-c has {snap_mounts}"
        assert not mounts_under(self.workdir), "nothing is ever mounted in the host namespace"

        got = a.read(self.resident_pod, self.resident, "resident.bin")
        assert digest(got) == self.resident_digest, f"after lifecycle {i}: resident data changed"
