"""Chaos: volume lifecycles with a kill -9 of the controller or a node plugin at a random point
of each, then a restart, then the invariants.

Each lifecycle provisions a volume (ext4, now and then a block volume), attaches it to one node,
stages it, starts a pod that writes and syncs data, checks that the other node's attach is
refused, moves the pod to the other node (full teardown, then setup), checks the data there,
tears everything down and deletes the volume.
At a random step one process (the controller or either node plugin) is killed with SIGKILL after
a random delay; the roles' retries restart it (as the container runtime would) and carry on.

Right after each restart (mid-lifecycle) the records are checked, and after every lifecycle
everything:
- every plugin is running and Probe answers ready;
- no leaked loop devices and no stale mounts: only the long-lived pod's volume is attached and
  mounted, on its node; nothing is mounted in the other node's namespace or on the host;
- no record lost: every acknowledged CreateVolume is listed until its DeleteVolume was
  acknowledged, and a deleted volume is gone;
- never two nodes holding one single-node volume (ListVolumes published_node_ids and the
  `csi-hostpath ledger list` output), nor any backing file behind two loop devices;
- the data of every acknowledged, synced write is intact (the moved pod's and the long-lived
  pod's).

CHAOS_LIFECYCLES (default 20) sets the number of lifecycles and CHAOS_SEED the seed (random when
unset). The seed is printed at the start and attached to any failure, so a run can be repeated:
the same seed makes the same choices (which nodes, which volume type, which process, at which
step, how far into it, which data); the kernel's timing, and so the exact instant of a kill, can
still differ.
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests import helpers as h
from tests.e2e.harness import PV, Cluster, Plugin, Pod
from tests.kernel import loops_backed_under, mounts_under
from tests.test_ledger_multinode import wait_for

LIFECYCLES = int(os.environ.get("CHAOS_LIFECYCLES", "20"))
SEED = os.environ.get("CHAOS_SEED", "")
NODES = ("node-a", "node-b")
DATA_BYTES = 256 * 1024

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(120 + 15 * LIFECYCLES)]


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
    """A step's name without its node: "stage on node-b" -> "stage"."""
    return step.split(" on ", 1)[0].split(" node-", 1)[0]


@dataclass
class Chaos:
    cluster: Cluster
    rng: random.Random
    workdir: Path
    live: dict[str, str] = field(default_factory=dict)  # acknowledged, not deleted: id -> name
    deleted: set[str] = field(default_factory=set)
    history: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)
    kills_inside: int = 0
    durations: dict[str, float] = field(default_factory=dict)  # step kind -> seconds (EWMA)
    # The long-lived pod on node-a: its volume stays staged and published through every kill.
    resident: PV | None = None
    resident_pod: Pod = field(default_factory=lambda: Pod("resident"))
    resident_digest: str = ""

    def plugin(self, name: str) -> Plugin:
        return self.cluster.controller if name == "controller" else self.cluster.nodes[name].plugin

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

    def lifecycle(self, i: int) -> None:
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

        # (name, the process whose RPC the step makes, the step)
        steps: list[tuple[str, str, Callable[[], None]]] = [
            ("provision", "controller", provision),
            (f"attach {first}", "controller", attach(first)),
            (f"stage on {first}", first, lambda: ka.mount_device(pv(), ctx(first))),
            (f"publish on {first}", first, lambda: ka.setup(pod, pv(), ctx(first))),
            (f"write on {first}", first, lambda: ka.write(pod, pv(), file_name, data)),
            (f"attach {second} refused", "controller", refused_elsewhere),
            (f"unpublish on {first}", first, lambda: ka.teardown(pod, pv())),
            (f"unstage on {first}", first, lambda: ka.unmount_device(pv())),
            (f"detach {first}", "controller", lambda: c.attacher.detach(pv(), first)),
            (f"attach {second}", "controller", attach(second)),
            (f"stage on {second}", second, lambda: kb.mount_device(pv(), ctx(second))),
            (f"publish on {second}", second, lambda: kb.setup(pod, pv(), ctx(second))),
            (f"read on {second}", second, verify),
            (f"unpublish on {second}", second, lambda: kb.teardown(pod, pv())),
            (f"unstage on {second}", second, lambda: kb.unmount_device(pv())),
            (f"detach {second}", "controller", lambda: c.attacher.detach(pv(), second)),
            ("delete", "controller", delete),
        ]
        kill_at = rng.randrange(len(steps))
        # Mostly the process the step talks to (a crash inside its RPC), sometimes a bystander.
        owner = steps[kill_at][1]
        victim = owner if rng.random() < 0.75 else rng.choice(["controller", *NODES])
        # A fraction of the step's usual duration, so that most kills land inside the step.
        delay = rng.random() * 1.2 * self.durations.get(_kind(steps[kill_at][0]), 0.02)
        self.history.append(
            f"lifecycle {i} ({'block' if block else 'ext4'}): {first} -> {second}; kill -9 "
            f"{victim} {delay * 1000:.1f} ms into step {kill_at} ({steps[kill_at][0]})"
        )
        for k, (name, _owner, step) in enumerate(steps):
            timer = None
            if k == kill_at:
                timer = threading.Timer(delay, self.plugin(victim).kill, args=(signal.SIGKILL,))
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
                # Right after the restart and its reconcile, mid-lifecycle: the records hold.
                self.plugin(victim).ensure_running()
                self.check_records(i, ledger=False)
        self.kills[victim] = self.kills.get(victim, 0) + 1

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

    def check_invariants(self, i: int) -> None:
        c = self.cluster
        assert self.resident is not None
        listed, holders = self.check_records(i)
        assert holders == {self.resident.handle: ["node-a"]}, holders
        assert listed[self.resident.handle] == ["node-a"]

        # Only the resident pod's volume is attached: one loop device. A device released while
        # still open (autoclear) can take a moment to go.
        wait_for(
            lambda: len(loops_backed_under(self.workdir)) == 1,
            10,
            f"only the resident's loop device after lifecycle {i}: "
            f"{loops_backed_under(self.workdir)}",
        )
        a, b = c.kubelet("node-a"), c.kubelet("node-b")
        expected = {
            str(a.staging_path(self.resident)),
            str(a.target_path(self.resident_pod, self.resident)),
        }
        assert set(a.stale_mounts()) == expected, f"after lifecycle {i}: {a.stale_mounts()}"
        assert not b.stale_mounts(), f"after lifecycle {i}: node-b has {b.stale_mounts()}"
        assert not mounts_under(self.workdir), "nothing is ever mounted in the host namespace"

        got = a.read(self.resident_pod, self.resident, "resident.bin")
        assert digest(got) == self.resident_digest, f"after lifecycle {i}: resident data changed"


def test_chaos_kill_9_during_lifecycles(
    make_cluster: Callable[..., Cluster], workdir: Path
) -> None:
    seed = int(SEED) if SEED else random.SystemRandom().randrange(1 << 32)
    print(f"chaos: CHAOS_SEED={seed} CHAOS_LIFECYCLES={LIFECYCLES}")
    chaos = Chaos(make_cluster(NODES), random.Random(seed), workdir)
    started = time.monotonic()
    try:
        chaos.start_resident()
        for i in range(LIFECYCLES):
            chaos.lifecycle(i)
            chaos.restart_all()
            chaos.check_invariants(i)
    except BaseException as e:
        e.add_note(
            f"chaos: reproduce with CHAOS_SEED={seed} CHAOS_LIFECYCLES={LIFECYCLES}\n"
            + "\n".join(chaos.history[-5:])
        )
        for plugin in chaos.cluster.plugins():
            e.add_note(f"--- {plugin.name} log (tail) ---\n{plugin.log()[-2500:]}")
        raise
    restarts = {p.name: p.restarts for p in chaos.cluster.plugins()}
    print(
        f"chaos: {LIFECYCLES} lifecycles in {time.monotonic() - started:.1f}s, "
        f"kills {chaos.kills} ({chaos.kills_inside} met by the step's own retry), "
        f"restarts {restarts}"
    )
    assert sum(restarts.values()) == LIFECYCLES, "every kill was followed by one restart"
