"""Chaos: kill -9 at a random point of volume lifecycles, a restart, then the invariants.

Two kinds of lifecycle, chosen at random:
- **move** (the split cluster: a `--mode controller` plugin and node plugins on node-a and
  node-b sharing one pool): provision a volume (ext4, now and then a block volume), attach it
  to one node, stage it, start a pod that writes and syncs data, snapshot it (the controller
  asks that node plugin to freeze the filesystem across processes, through the pool), check
  that the other node's attach is refused, move the pod to the other node (full teardown, then
  setup), check the data there, tear everything down and delete the volume and its snapshot
  (chaos_move.py);
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

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.service.node.freeze import TEST_HOLD_ENV
from tests.e2e.chaos_invariants import DATA_BYTES, NODES, SNAP_NODE, ChaosRun, digest
from tests.e2e.chaos_move import move_steps
from tests.e2e.chaos_snap import (
    HOLD_SECONDS,
    Pool,
    SnapNode,
    Step,
    restore_steps,
    run_plain,
    snapshot_source,
)
from tests.e2e.harness import Cluster, Node
from tests.support import helpers as h

# The short run in `make test` (about a minute on a loaded two-CPU machine); `make chaos` sets 200.
LIFECYCLES = int(os.environ.get("CHAOS_LIFECYCLES", "10"))
SEED = os.environ.get("CHAOS_SEED", "")
# The share of snap lifecycles, and of kills that lose the victim's state directory too.
SNAP_RATE = 0.4
LOSS_RATE = 0.2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120 + 15 * LIFECYCLES)]


def _kind(step: str) -> str:
    """A step's name without its node or lifecycle: "stage on node-b" -> "stage",
    "stage clone-7 on node-c" -> "stage clone"."""
    return step.split(" on ", 1)[0].split(" node-", 1)[0].split("-", 1)[0]


class Chaos(ChaosRun):
    """The run: lifecycles of either kind, each with one kill -9 (and now and then a state
    loss) in it, then a restart and the checks."""

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
            label, steps = move_steps(self, i)
            self.run(i, label, steps)

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
