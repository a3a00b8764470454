"""Chaos: kill -9 at a random point of volume lifecycles, a restart, then the invariants.

Two kinds of lifecycle, chosen at random:
- **move** (the split cluster: a `--mode controller` plugin and node plugins on node-a and
  node-b sharing one pool): provision a volume (ext4, now and then a block volume), attach it
  to one node, stage it, start a pod that writes and syncs data, snapshot it (the controller
  asks that node plugin to freeze the filesystem across processes, through the pool), check
  that the other node's attach is refused, move the pod to the other node (full teardown, then
  setup), check the data there, tear everything down and delete the volume and its snapshot;
- **snap** (node-c, a `--mode all` driver whose snapshots and clones freeze the source's
  filesystem; see chaos_snap.py): write to a mounted volume, snapshot it, restore the snapshot
  and read the data back, clone the volume and read the clone, delete what was made.

At a random step one process (mostly the one the step talks to, sometimes a bystander) is killed
with SIGKILL after a random delay; the roles' retries restart it (as the container runtime
would) and carry on. One kill in LOSS_RATE also loses the victim's state directory before the
restart: deleted ("empty": a new or mistyped --state-dir, a pod moved to a node whose hostPath is
empty) or state.db cut to zero bytes ("truncated"). The pool stays: the restart rebuilds from it.

Right after each restart (mid-lifecycle) the records are checked and the frozen probe runs, and
after every lifecycle everything:
- every plugin is running and Probe answers ready;
- no leaked loop devices and no stale mounts: only the long-lived pods' volumes (node-a's and
  node-c's) are attached and mounted, on their nodes; nothing is mounted in node-b's namespace or
  on the host;
- **no file lost**: every acknowledged CreateVolume and CreateSnapshot keeps its backing file in
  its pool and is listed until its delete was acknowledged, and a deleted one is gone;
- **nothing left frozen**: every long-lived volume takes a write with fsync within
  chaos_snap.WRITABLE_WITHIN seconds, and node-c has no freeze record left;
- never two nodes holding one single-node volume (ListVolumes published_node_ids and the
  `csi-hostpath ledger list` output), nor any backing file behind two loop devices;
- the data of every acknowledged, synced write is intact (the moved pod's, the restored and
  cloned volumes', the long-lived pods');
- after a controller lost its state, a restore from the snapshot taken at the start of the run
  reads back the data written before it.

CHAOS_LIFECYCLES (default 10) sets the number of lifecycles and CHAOS_SEED the seed (random when
unset). The seed is printed at the start and attached to any failure, so a run can be repeated:
the same seed makes the same choices (which kind, which nodes, which volume type, which process,
at which step, how far into it, which state loss, which data); the kernel's timing, and so the
exact instant of a kill, can still differ. The last line prints the files lost and the
filesystems left frozen (both must be 0).
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.service.node.freeze import TEST_HOLD_ENV
from tests import helpers as h
from tests.e2e.chaos_snap import (
    HOLD_SECONDS,
    WRITABLE_WITHIN,
    Pool,
    SnapNode,
    Step,
    restore_steps,
    run_plain,
    snapshot_source,
)
from tests.e2e.harness import PV, Cluster, Kubelet, Node, Pod
from tests.e2e.node_runtime import Backoff, Plugin
from tests.kernel import loops_backed_under, mounts_under
from tests.processes import wait_for

# The short run in `make test` (about a minute on a loaded two-CPU machine); `make chaos` sets 200.
LIFECYCLES = int(os.environ.get("CHAOS_LIFECYCLES", "10"))
SEED = os.environ.get("CHAOS_SEED", "")
NODES = ("node-a", "node-b")
SNAP_NODE = "node-c"
DATA_BYTES = 256 * 1024
# The share of snap lifecycles, and of kills that lose the victim's state directory too.
SNAP_RATE = 0.4
LOSS_RATE = 0.2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120 + 15 * LIFECYCLES)]


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


def _kind(step: str) -> str:
    """A step's name without its node or lifecycle: "stage on node-b" -> "stage",
    "stage clone-7 on node-c" -> "stage clone"."""
    return step.split(" on ", 1)[0].split(" node-", 1)[0].split("-", 1)[0]


@dataclass
class Chaos:
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

    def start_resident(self) -> None:
        c = self.cluster
        pv = c.provisioner.provision("pvc-resident", h.mount_cap("ext4"), 32 * h.MiB)
        self.live[pv.handle] = pv.name
        ctx = c.attacher.attach(pv, "node-a")
        kubelet = c.kubelet("node-a")
        kubelet.mount_device(pv, ctx)
        kubelet.setup(self.resident_pod, pv, ctx)
        data = self.rng.randbytes(DATA_BYTES)
        kubelet.write(self.resident_pod, pv, "resident.bin", data)
        self.resident, self.resident_digest = pv, digest(data)
        # A snapshot with the resident's data, to restore after the controller lost its state.
        response = c.controller.call(
            "controller", "CreateSnapshot", pb.CreateSnapshotRequest(
                source_volume_id=pv.handle, name="keeper")
        )  # fmt: skip
        self.keeper = str(response.snapshot.snapshot_id)
        self.pool.snapshots[self.keeper] = "keeper"

    def restore_keeper(self, tag: str) -> None:
        """The run's first snapshot restores on node-b, and the resident's data reads back."""
        c = self.cluster
        run_plain(
            restore_steps(
                tag, "controller", "node-b", c.provisioner, c.attacher, c.kubelet("node-b"),
                self.pool, lambda: snapshot_source(self.keeper), "resident.bin",
                lambda: self.resident_digest,
            )
        )  # fmt: skip

    def lifecycle(self, i: int) -> None:
        if self.rng.random() < SNAP_RATE:
            self.run(i, f"snap on {SNAP_NODE}", self.snap.steps(i))
        else:
            label, steps = self.move_steps(i)
            self.run(i, label, steps)

    def move_steps(self, i: int) -> tuple[str, list[Step]]:
        c, rng = self.cluster, self.rng
        first, second = rng.sample(NODES, 2)
        ka, kb = c.kubelet(first), c.kubelet(second)
        pod = Pod(f"pod-{i}")
        data = rng.randbytes(DATA_BYTES)
        # Mostly filesystem volumes; a block volume now and then (its pod writes the device).
        block = rng.random() < 0.25
        cap = h.block_cap() if block else h.mount_cap("ext4")
        file_name = "" if block else "data.bin"
        state: dict[str, object] = {}

        def pv() -> PV:
            volume = state["pv"]
            assert isinstance(volume, PV)
            return volume

        def ctx(node: str) -> dict[str, str]:
            value = state[f"ctx-{node}"]
            assert isinstance(value, dict)
            return value

        def provision() -> None:
            state["pv"] = c.provisioner.provision(f"pvc-{i}", cap, 16 * h.MiB)
            self.live[pv().handle] = pv().name  # acknowledged

        def attach(node: str) -> Callable[[], None]:
            return lambda: state.update({f"ctx-{node}": c.attacher.attach(pv(), node)})

        def refused_elsewhere() -> None:
            h.expect_code(grpc.StatusCode.FAILED_PRECONDITION, c.attacher.attach, pv(), second)

        def verify() -> None:
            got = kb.read(pod, pv(), file_name, size=len(data))
            assert digest(got) == digest(data), f"lifecycle {i}: the moved pod's data changed"

        def delete() -> None:
            c.provisioner.delete(pv())
            del self.live[pv().handle]  # acknowledged
            self.deleted.add(pv().handle)

        def snapshot() -> None:
            """The controller asks `first` to freeze the mounted volume for the copy (across
            processes, through the pool). A kill of `first` in the window makes the snapshot
            ABORTED until a new incarnation answers: restart it, as the container runtime
            would, and retry."""
            request = rq.create_snapshot(f"snap-{i}", pv().handle)
            for _ in range(60):
                c.nodes[first].plugin.ensure_running()
                try:
                    response = c.controller.call(
                        "controller", "CreateSnapshot", request, backoff=Backoff(attempts=1)
                    )
                except grpc.RpcError as e:
                    if e.code() not in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE):
                        raise
                    c.controller.ensure_running()
                    time.sleep(0.2)
                    continue
                state["snap"] = str(response.snapshot.snapshot_id)
                self.pool.snapshots[str(state["snap"])] = f"snap-{i}"
                return
            raise AssertionError(f"lifecycle {i}: the snapshot never succeeded")

        def writable() -> None:
            """Judged with the node plugin running: one killed while it held the freeze thaws
            it when it starts again (the container runtime restarts it; nothing else calls it
            here). A kill can land while the probe waits, so a dead plugin gets one restart
            and a second probe; a live one that leaves the volume frozen fails at once."""
            if block:
                return
            plugin = c.nodes[first].plugin
            for _ in range(2):
                plugin.ensure_running()
                if ka.writable(ka.target_path(pod, pv()), WRITABLE_WITHIN):
                    return
                if plugin.alive():
                    break
            raise AssertionError(f"lifecycle {i}: left frozen on {first} after the snapshot")

        def delete_snapshot() -> None:
            snap = str(state["snap"])
            c.controller.call("controller", "DeleteSnapshot", rq.delete_snapshot(snap))
            del self.pool.snapshots[snap]
            self.pool.deleted.add(snap)

        def snapshot_watched() -> None:
            # While the pod runs on `first`, the frozen probe watches its volume too.
            self.moving = None if block else (ka, ka.target_path(pod, pv()))
            snapshot()

        def unpublish_first() -> None:
            self.moving = None
            ka.teardown(pod, pv())

        # (name, the process whose RPC the step makes, the step)
        steps: list[Step] = [
            ("provision", "controller", provision),
            (f"attach {first}", "controller", attach(first)),
            (f"stage on {first}", first, lambda: ka.mount_device(pv(), ctx(first))),
            (f"publish on {first}", first, lambda: ka.setup(pod, pv(), ctx(first))),
            (f"write on {first}", first, lambda: ka.write(pod, pv(), file_name, data)),
            (f"snapshot on {first}", first, snapshot_watched),
            (f"writable on {first}", first, writable),
            (f"attach {second} refused", "controller", refused_elsewhere),
            (f"unpublish on {first}", first, unpublish_first),
            (f"unstage on {first}", first, lambda: ka.unmount_device(pv())),
            (f"detach {first}", "controller", lambda: c.attacher.detach(pv(), first)),
            (f"attach {second}", "controller", attach(second)),
            (f"stage on {second}", second, lambda: kb.mount_device(pv(), ctx(second))),
            (f"publish on {second}", second, lambda: kb.setup(pod, pv(), ctx(second))),
            (f"read on {second}", second, verify),
            (f"unpublish on {second}", second, lambda: kb.teardown(pod, pv())),
            (f"unstage on {second}", second, lambda: kb.unmount_device(pv())),
            (f"detach {second}", "controller", lambda: c.attacher.detach(pv(), second)),
            ("delete snapshot", "controller", delete_snapshot),
            ("delete", "controller", delete),
        ]
        return f"move ({'block' if block else 'ext4'}): {first} -> {second}", steps

    def run(self, i: int, label: str, steps: list[Step]) -> None:
        """Run the steps with one kill -9 in them (and sometimes a state loss), then check."""
        rng = self.rng
        kill_at = rng.randrange(len(steps))
        # Mostly the process the step talks to (a crash inside its RPC), sometimes a bystander.
        owner = steps[kill_at][1]
        victim = owner if rng.random() < 0.75 else rng.choice(self.processes())
        lose = rng.choice(["empty", "truncated"]) if rng.random() < LOSS_RATE else ""
        # A fraction of the step's usual duration, so that most kills land inside the step.
        delay = rng.random() * 1.2 * self.durations.get(_kind(steps[kill_at][0]), 0.02)
        self.history.append(
            f"lifecycle {i} {label}; kill -9 {victim}{f' (state {lose})' if lose else ''} "
            f"{delay * 1000:.1f} ms into step {kill_at} ({steps[kill_at][0]})"
        )
        for k, (name, _owner, step) in enumerate(steps):
            timer = None
            if k == kill_at:
                timer = threading.Timer(delay, self.plugin(victim).crash, args=(lose,))
                timer.start()
            began = time.monotonic()
            restarts = self.plugin(victim).restarts
            try:
                step()
            except BaseException as e:
                e.add_note(f"lifecycle {i}, step {k}: {name}")
                raise
            finally:
                if timer is not None:
                    timer.join()
            if timer is None:
                # Learn how long each kind of step takes without a kill in it.
                elapsed = time.monotonic() - began
                kind = _kind(name)
                self.durations[kind] = 0.8 * self.durations.get(kind, elapsed) + 0.2 * elapsed
            elif self.plugin(victim).restarts > restarts:
                self.kills_inside += 1  # the step's own retry met the dead plugin
            if timer is not None:
                # Right after the restart and its reconcile, mid-lifecycle: the records hold and
                # nothing is frozen.
                self.plugin(victim).ensure_running()
                self.check_records(i, ledger=False)
                self.check_files_and_freezes(i)
        self.kills[victim] = self.kills.get(victim, 0) + 1
        if lose:
            self.losses[f"{victim} {lose}"] += 1
            # The old snapshot restores after the rebuild (a node plugin's loss is checked by
            # the resident's mounts and data after every lifecycle).
            if victim == "controller":
                self.restore_keeper(f"keeper-{i}")
            elif victim == SNAP_NODE:
                self.snap.restore_keeper(f"keeper-{i}")

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


def test_chaos_kill_9_during_lifecycles(
    make_cluster: Callable[..., Cluster],
    make_local_node: Callable[..., Node],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed = int(SEED) if SEED else random.SystemRandom().randrange(1 << 32)
    print(f"chaos: CHAOS_SEED={seed} CHAOS_LIFECYCLES={LIFECYCLES}")
    rng = random.Random(seed)
    # Every freeze held a moment (only node-c freezes), so kills land inside the window.
    monkeypatch.setenv(TEST_HOLD_ENV, HOLD_SECONDS)
    snap_pool = workdir / "snap-pool"
    node_c = make_local_node(SNAP_NODE, "--pool-dir", str(snap_pool))
    snap = SnapNode(node_c, Pool(snap_pool), rng)
    chaos = Chaos(make_cluster(NODES), snap, rng, workdir, Pool(workdir / "pool"))
    started = time.monotonic()
    try:
        chaos.start_resident()
        snap.start()
        for plugin in [*chaos.cluster.plugins(), snap.plugin]:
            plugin.after_restart.append(chaos.probe_after_restart)
        for i in range(LIFECYCLES):
            chaos.lifecycle(i)
            chaos.restart_all()
            chaos.check_invariants(i)
    except BaseException as e:
        e.add_note(
            f"chaos: reproduce with CHAOS_SEED={seed} CHAOS_LIFECYCLES={LIFECYCLES}\n"
            f"files lost {chaos.files_lost}, filesystems left frozen {chaos.left_frozen}\n"
            + "\n".join(chaos.history[-5:])
        )
        for plugin in [*chaos.cluster.plugins(), snap.plugin]:
            e.add_note(f"--- {plugin.name} log (tail) ---\n{plugin.log()[-2500:]}")
        raise
    finally:
        # Whatever happened, leave nothing frozen in the shared kernel.
        if chaos.resident is not None:
            a = chaos.cluster.kubelet("node-a")
            a.thaw_all([a.staging_path(chaos.resident)])
        if snap.source is not None:
            snap.kubelet.thaw_all(snap.paths()[:1])
        if chaos.moving is not None:
            chaos.moving[0].thaw_all([chaos.moving[1]])
    restarts = {p.name: p.restarts for p in [*chaos.cluster.plugins(), snap.plugin]}
    print(
        f"chaos: {LIFECYCLES} lifecycles in {time.monotonic() - started:.1f}s, "
        f"kills {chaos.kills} ({chaos.kills_inside} met by the step's own retry), "
        f"state lost {dict(chaos.losses)}, restarts {restarts}"
    )
    # How many restarts found a filesystem frozen (a kill inside the freeze window) and
    # thawed it from its record: the run must have tested the window, not only stepped past it.
    thawed = sum(
        p.handle.log_path.read_text(errors="replace").count("repair: thawed")
        for p in [*chaos.cluster.plugins(), snap.plugin]
    )
    print(
        f"chaos: files lost {chaos.files_lost}, filesystems left frozen {chaos.left_frozen} "
        f"({thawed} frozen filesystems thawed by a restart)"
    )
    assert sum(restarts.values()) == LIFECYCLES, "every kill was followed by one restart"
    assert chaos.files_lost == 0 and chaos.left_frozen == 0
