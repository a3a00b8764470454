"""The move lifecycle of test_chaos.py, on the split cluster: a pod moves from node to node.

The steps in the order test_chaos.py's docstring gives them; each names the process whose RPC
it makes, for the run to aim its kill at.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from csi_hostpath.client import csi_requests as rq
from tests.e2e.chaos_invariants import DATA_BYTES, NODES, ChaosRun, digest
from tests.e2e.chaos_snap import WRITABLE_WITHIN, Step
from tests.e2e.harness import PV, Pod
from tests.e2e.node_runtime import Backoff
from tests.support import helpers as h


def move_steps(chaos: ChaosRun, i: int) -> tuple[str, list[Step]]:
    """Lifecycle i's label and steps: (name, the process whose RPC it makes, the step)."""
    c, rng = chaos.cluster, chaos.rng
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
        chaos.live[pv().handle] = pv().name  # acknowledged

    def attach(node: str) -> Callable[[], None]:
        return lambda: state.update({f"ctx-{node}": c.attacher.attach(pv(), node)})

    def refused_elsewhere() -> None:
        h.expect_code(grpc.StatusCode.FAILED_PRECONDITION, c.attacher.attach, pv(), second)

    def verify() -> None:
        got = kb.read(pod, pv(), file_name, size=len(data))
        assert digest(got) == digest(data), f"lifecycle {i}: the moved pod's data changed"

    def delete() -> None:
        c.provisioner.delete(pv())
        del chaos.live[pv().handle]  # acknowledged
        chaos.deleted.add(pv().handle)

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
            chaos.pool.snapshots[str(state["snap"])] = f"snap-{i}"
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
        del chaos.pool.snapshots[snap]
        chaos.pool.deleted.add(snap)

    def snapshot_watched() -> None:
        # While the pod runs on `first`, the frozen probe watches its volume too.
        chaos.moving = None if block else (ka, ka.target_path(pod, pv()))
        snapshot()

    def unpublish_first() -> None:
        chaos.moving = None
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
