"""Node failure and recovery, played by models of Kubernetes over real driver processes.

Node failure and recovery, played by models of the real Kubernetes components over a real
controller and real node plugins in their own mount namespaces. The models (tests/e2e/k8s_models:
external-attacher, the attach-detach controller, the kubelet's volume manager, external-provisioner
and the node lifecycle controller) each name their upstream source; no cluster is needed. Time is
simulated, so the attach-detach controller's 6 minutes take a moment; the driver's own clock is
real, so a frozen node is frozen for longer than --node-grace (2 s here) before the driver is asked
anything about it.

A scenario acts only as a user would (pods, taints, `ledger force-detach`) and lets the models
send every CSI call."""

from __future__ import annotations

import hashlib
import itertools
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.store.pool_layout import PoolLayout
from tests.e2e.harness import TOPOLOGY_KEY, Cluster, Node
from tests.e2e.harness import Pod as PodPaths
from tests.e2e.k8s_models.adc import MAX_WAIT_FOR_UNMOUNT
from tests.e2e.k8s_models.clock import SimClock
from tests.e2e.k8s_models.objects import OUT_OF_SERVICE, Api, Claim
from tests.e2e.k8s_models.provisioner import ExternalProvisioner
from tests.e2e.k8s_models.world import World
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under
from tests.support.processes import wait_for

GRACE = "2"
PVC = "pvc-web-0"


def _world(make_cluster: Callable[..., Cluster], **node_flags: tuple[str, ...]) -> World:
    """node_flags: more `serve` flags for a node, by its name."""
    # The controller judges silence with the same grace as the node plugins and the operator.
    return World(make_cluster(controller_flags=("--node-grace", GRACE), node_flags=node_flags))


def _mounted(world: World, node: str, uid: str) -> bool:
    return world.kubelets[node].mounts.get((uid, PVC)) is False


def _start(world: World, uid: str, node: str) -> bytes:
    """Provision the claim and run pod web-0 on node; it writes and syncs 4 MiB."""
    world.provisioner.claim(Claim(PVC, 64 * h.MiB, cap=h.mount_cap("ext4")))
    world.run_until(lambda: PVC in world.api.pvs, 30, "provisioning")
    world.api.create_pod("web-0", uid, node, PVC)
    world.run_until(lambda: _mounted(world, node, uid), 60, f"web-0 running on {node}")
    payload = os.urandom(4 * h.MiB)
    world.cluster.kubelet(node).write(PodPaths(uid), world.api.pvs[PVC], "data.bin", payload)
    return payload


def _read(world: World, node: str, uid: str) -> bytes:
    return world.cluster.kubelet(node).read(PodPaths(uid), world.api.pvs[PVC], "data.bin")


def _audit(world: World) -> list[str]:
    out = world.cluster.ledger("audit", "--volume", world.api.pvs[PVC].handle).stdout
    return [line.split()[3] for line in out.splitlines()[1:]]


def _freeze_past_grace(world: World, node: str) -> None:
    world.freeze(node)
    time.sleep(float(GRACE) + 0.3)  # the driver's clock: node's heartbeat is now silent


def _thaw_and_expect_fence(world: World, node: str) -> None:
    world.thaw(node, kubelet=False)
    plugin = world.cluster.nodes[node].plugin
    wait_for(lambda: "FENCING volume" in plugin.log(), 10, f"{node} to fence itself")
    # The fence is over once the node's heartbeat stops listing the volume (written after the
    # fence lets go of the volume's guard).
    layout = PoolLayout(world.cluster.workdir / "pool")
    node_id = world.cluster.nodes[node].node_id
    handle = world.api.pvs[PVC].handle
    wait_for(lambda: handle not in _listed(layout, node_id), 10, f"{node}'s fence to finish")
    world.thaw(node)
    # Its kubelet, back too, tears down what its deleted pod had (idempotent after the fence).
    kubelet = world.kubelets[node]
    try:
        world.run_until(lambda: not kubelet.devices and not kubelet.mounts, 60, "teardown")
    except AssertionError as e:
        raise AssertionError(f"{e}: {kubelet.errors}") from None
    assert not world.cluster.kubelet(node).stale_mounts()
    wait_for(lambda: "fenced" in _audit(world), 10, "the fence in the audit trail")


def _listed(layout: PoolLayout, node_id: str) -> dict[str, Any]:
    beat = layout.heartbeat(node_id)
    return beat.volumes if beat else {}


def _cleanup(world: World, uid: str) -> None:
    world.api.delete_pod(uid)
    world.run_until(lambda: not world.api.vas, 60, "the last detach")
    handle = world.api.pvs[PVC].handle
    world.cluster.controller.call("controller", "DeleteVolume", rq.delete_volume(handle))
    assert not loops_backed_under(world.cluster.workdir)


def test_force_detach_then_the_attachers_reconcile_cannot_give_the_volume_back(
    make_cluster: Callable[..., Cluster],
) -> None:
    """`ledger force-detach` of frozen node-a; external-attacher's ReconcileVA (csi_handler.go)
    finds node-a's VolumeAttachment attached but not in ListVolumes and publishes to node-a again
    (forceSync). The driver refuses a silent node a new hold, so the force-detach stands. The
    pod moves to node-b once the attach-detach controller lets go of node-a (6 minutes on an
    unhealthy node); node-a fences itself when it thaws.

    Failed on the old code: the forced re-publish was granted (no attach error on node-a's
    VolumeAttachment, node-a back in the ledger)."""
    world = _world(make_cluster)
    payload = _start(world, "uid-a", "node-a")
    pv = world.api.pvs[PVC]
    _freeze_past_grace(world, "node-a")

    forced = world.cluster.force_detach(
        pv, "node-a", "--reason", "node-a frozen", "--node-grace", GRACE
    )
    assert forced.returncode == 0, forced
    calls_before = len(world.attacher.calls)
    world.advance(61)  # one --reconcile-sync
    va_a = world.api.va_for(pv, "node-a")
    assert va_a is not None and va_a.attached, "Kubernetes still shows node-a attached"
    assert ("ControllerPublishVolume", pv.handle, "node-a") in world.attacher.calls[calls_before:]
    assert "FAILED_PRECONDITION" in va_a.attach_error and "no heartbeat" in va_a.attach_error
    assert world.cluster.ledger_holders() == {}, "the reconcile did not undo the force-detach"

    # The pod is force-deleted and its replacement lands on node-b; the attach-detach
    # controller's own multi-attach guard holds node-b back while node-a is attached.
    world.api.force_delete_pod("uid-a")
    world.api.create_pod("web-0", "uid-b", "node-b", PVC)
    moved = world.run_until(lambda: _mounted(world, "node-b", "uid-b"), 420, "web-0 on node-b")
    assert moved > MAX_WAIT_FOR_UNMOUNT, moved
    assert any("Multi-Attach" in m for m in world.api.events_of("FailedAttachVolume"))
    assert (
        hashlib.sha256(_read(world, "node-b", "uid-b")).digest() == hashlib.sha256(payload).digest()
    )
    assert world.cluster.ledger_holders() == {pv.handle: ["node-b"]}

    _thaw_and_expect_fence(world, "node-a")
    assert _audit(world) == ["publish", "force-detach", "publish", "fenced"]
    _cleanup(world, "uid-b")


def test_the_six_minute_force_detach_of_an_unhealthy_node(
    make_cluster: Callable[..., Cluster],
) -> None:
    """reconciler.go reconcile: a volume no pod wants on node-a, still in node-a's
    status.volumesInUse, is detached anyway once maxWaitForUnmountDuration has passed and the
    node is not Ready: a ControllerUnpublishVolume with no NodeUnstage before it, which the
    ledger records as a revocation."""
    world = _world(make_cluster)
    payload = _start(world, "uid-a", "node-a")
    pv = world.api.pvs[PVC]
    _freeze_past_grace(world, "node-a")
    world.api.force_delete_pod("uid-a")
    world.api.create_pod("web-0", "uid-b", "node-b", PVC)
    deleted_at = world.clock.now

    world.advance(MAX_WAIT_FOR_UNMOUNT - 10)
    assert not world.api.nodes["node-a"].ready
    assert world.api.va_for(pv, "node-a") is not None, "no detach before the 6 minutes"
    assert world.cluster.ledger_holders() == {pv.handle: ["node-a"]}
    assert ("ControllerUnpublishVolume", pv.handle, "node-a") not in world.attacher.calls

    world.run_until(lambda: _mounted(world, "node-b", "uid-b"), 60, "web-0 on node-b")
    detach = next(line for line in world.adc.log if "detach pvc" in line and "node-a" in line)
    assert "maxWaitForUnmountDuration" in detach, world.adc.log
    assert world.clock.now - deleted_at > MAX_WAIT_FOR_UNMOUNT
    assert _read(world, "node-b", "uid-b") == payload
    assert _audit(world) == ["publish", "revoke", "publish"]
    audit = world.cluster.ledger("audit", "--volume", pv.handle).stdout
    assert "without NodeUnstage" in audit and "maxWaitForUnmountDuration" in audit

    _thaw_and_expect_fence(world, "node-a")
    _cleanup(world, "uid-b")


def test_the_out_of_service_taint_detaches_at_once(make_cluster: Callable[..., Cluster]) -> None:
    """Non-graceful node shutdown: node-a is down and an operator taints it
    node.kubernetes.io/out-of-service. The pod GC force-deletes its pod, the StatefulSet
    recreates it on node-b, and the attach-detach controller detaches from node-a without
    waiting (hasOutOfServiceTaint): a revocation in the ledger."""
    world = _world(make_cluster)
    payload = _start(world, "uid-a", "node-a")
    _freeze_past_grace(world, "node-a")
    world.run_until(lambda: not world.api.nodes["node-a"].ready, 120, "node-a NotReady")
    assert "uid-a" in world.api.pods, "without the taint the pod stays, Terminating or not"

    world.api.taint("node-a", OUT_OF_SERVICE)
    tainted_at = world.clock.now
    world.run_until(lambda: "uid-a" not in world.api.pods, 10, "the pod GC")
    world.api.create_pod("web-0", "uid-b", "node-b", PVC)
    world.run_until(lambda: _mounted(world, "node-b", "uid-b"), 60, "web-0 on node-b")
    assert world.clock.now - tainted_at < 60, "no 6-minute wait under the taint"
    assert any("out-of-service taint" in line for line in world.adc.log), world.adc.log
    assert _read(world, "node-b", "uid-b") == payload
    assert _audit(world) == ["publish", "revoke", "publish"]

    _thaw_and_expect_fence(world, "node-a")
    _cleanup(world, "uid-b")


def test_a_partitioned_node_still_running_is_revoked_and_fences_before_the_new_stage(
    make_cluster: Callable[..., Cluster],
) -> None:
    """node-a is cut off from the control plane (its kubelet silent, NotReady) but its plugin
    still runs, mounted, and still reaches the pool: the case where the taint is applied to a
    node that is not really down. The attach-detach controller detaches at once; the driver
    records a revocation (node-a's fresh heartbeat still lists the volume staged). node-b's
    NodeStage is refused ABORTED while node-a's heartbeat lists it; the kubelet retries with
    its backoff, node-a fences itself at its next fence pass, and the retry goes through.
    node-a's fence pass comes every 5 s here, not every second: on a loaded machine node-a
    fenced before node-b's first NodeStage, which then had nothing to refuse."""
    world = _world(make_cluster, **{"node-a": ("--fence-interval", "5")})
    payload = _start(world, "uid-a", "node-a")
    world.partition("node-a")
    world.run_until(lambda: not world.api.nodes["node-a"].ready, 120, "node-a NotReady")
    world.api.taint("node-a", OUT_OF_SERVICE)
    world.run_until(lambda: "uid-a" not in world.api.pods, 10, "the pod GC")
    world.api.create_pod("web-0", "uid-b", "node-b", PVC)
    world.run_until(lambda: _mounted(world, "node-b", "uid-b"), 120, "web-0 on node-b", pace=0.05)

    kubelet_b = world.kubelets["node-b"]
    refused = [(t, e) for t, op, e in kubelet_b.failures if op == f"mountdevice/{PVC}"]
    assert refused and all(e.startswith("ABORTED") and "node-a" in e for _, e in refused)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(refused)]
    assert gaps == sorted(gaps), f"the retries back off: {gaps}"
    print(f"node-b's NodeStage refused {len(refused)} times, retried after {gaps} s")
    assert "FENCING volume" in world.cluster.nodes["node-a"].plugin.log()
    assert world.cluster.kubelet("node-a").stale_mounts() == []
    assert _read(world, "node-b", "uid-b") == payload
    assert _audit(world)[:3] == ["publish", "revoke", "publish"]
    audit = world.cluster.ledger("audit", "--volume", world.api.pvs[PVC].handle).stdout
    assert "still lists the volume as staged" in audit

    # The partition heals: node-a's kubelet tears down what its deleted pod had.
    world.kubelets["node-a"].frozen = False
    world.run_until(lambda: not world.kubelets["node-a"].devices, 60, "node-a's teardown")
    _cleanup(world, "uid-b")


def test_a_kubelet_restart_reconstructs_and_finishes_the_pod(
    make_cluster: Callable[..., Cluster],
) -> None:
    """reconstruct_new.go reconstructVolumes: after a restart (here with the node plugin killed
    -9 and restarted too) the kubelet finds the volume in the pod's directory, marks it
    uncertain, and the reconciler stages and publishes it again (idempotent: same data, no
    unstage). A pod deleted while the kubelet was down is torn down in order after the next
    restart: NodeUnpublish, NodeUnstage, then the detach, an ordinary unpublish in the ledger."""
    world = _world(
        make_cluster,
    )
    payload = _start(world, "uid-a", "node-a")
    kubelet = world.kubelets["node-a"]
    node_a = world.cluster.nodes["node-a"]

    node_a.plugin.kill(signal.SIGKILL)
    node_a.plugin.restart()
    kubelet.restart()
    assert kubelet.mounts == {("uid-a", PVC): True} and kubelet.devices == {PVC: True}
    first = len(kubelet.calls)
    world.run_until(lambda: _mounted(world, "node-a", "uid-a"), 60, "the remount")
    assert kubelet.calls[first:] == [("NodeStageVolume", PVC), ("NodePublishVolume", PVC)]
    assert _read(world, "node-a", "uid-a") == payload

    kubelet.frozen = True  # the kubelet is down (its plugin keeps running)
    world.api.delete_pod("uid-a")
    world.advance(5)
    assert "uid-a" in world.api.pods, "nothing finishes the pod while the kubelet is down"
    kubelet.frozen = False
    kubelet.restart()
    first = len(kubelet.calls)
    world.run_until(lambda: not world.api.vas, 60, "the detach")
    assert kubelet.calls[first:] == [("NodeUnpublishVolume", PVC), ("NodeUnstageVolume", PVC)]
    assert "uid-a" not in world.api.pods
    assert _audit(world) == ["publish", "unpublish"]
    assert not world.cluster.kubelet("node-a").stale_mounts()
    handle = world.api.pvs[PVC].handle
    world.cluster.controller.call("controller", "DeleteVolume", rq.delete_volume(handle))
    assert not loops_backed_under(world.cluster.workdir)


def test_wait_for_first_consumer_in_the_local_shape(
    make_local_node: Callable[[str], Node],
) -> None:
    """The chart's local shape runs one external-provisioner per node (--node-deployment,
    --strict-topology, --immediate-topology=false). checkNode leaves a claim with no selected node
    alone (Pending, as WaitForFirstConsumer wants); once the scheduler selects node-b, only
    node-b's instance creates the volume, asking for node-b's topology alone."""
    nodes = {name: make_local_node(name) for name in ("node-a", "node-b")}
    clock, api = SimClock(), Api()
    instances = {
        name: ExternalProvisioner(
            api,
            clock,
            node.plugin,
            nodes,
            node_deployment=name,
            strict_topology=True,
            immediate_topology=False,
        )
        for name, node in nodes.items()
    }
    claim = Claim("pvc-wffc", 32 * h.MiB, cap=h.mount_cap("ext4"))
    for instance in instances.values():
        instance.claim(claim)  # every instance watches the same claim

    def step(seconds: float) -> None:
        end = clock.now + seconds
        while clock.now < end:
            clock.now += 0.5
            for instance in instances.values():
                instance.sync()

    step(30)
    assert "pvc-wffc" not in api.pvs, "no consumer yet: Pending"
    claim.selected_node = "node-b"  # the scheduler's volume.kubernetes.io/selected-node
    step(2)
    pv = api.pvs["pvc-wffc"]
    expected = {TOPOLOGY_KEY: nodes["node-b"].node_id}
    assert [dict(t.segments) for t in pv.volume.accessible_topology] == [expected]
    assert instances["node-a"].outcomes == [], "node-a's instance never asked its driver"
    assert instances["node-b"].outcomes == ["pvc-wffc: provisioned"]
    listed_a = nodes["node-a"].plugin.call("controller", "ListVolumes", pb.ListVolumesRequest())
    assert not listed_a.entries, "node-a's pool got nothing"
    nodes["node-b"].plugin.call("controller", "DeleteVolume", rq.delete_volume(pv.handle))


@pytest.mark.parametrize(
    ("code", "selected", "state"),
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, True, "reschedule"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, False, "finished"),
        (grpc.StatusCode.ABORTED, True, "in background"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, False, "in background"),
        (grpc.StatusCode.UNAVAILABLE, False, "in background"),
        (grpc.StatusCode.INVALID_ARGUMENT, True, "finished"),
    ],
)
def test_the_provisioners_check_error(code: grpc.StatusCode, selected: bool, state: str) -> None:
    """controller.go checkError: how external-provisioner reads the driver's codes."""
    assert ExternalProvisioner.check_error(code, selected) == state
