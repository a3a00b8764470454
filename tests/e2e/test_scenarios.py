"""The first Kubernetes scenarios, played by the harness's roles over real driver processes.

The first Kubernetes scenarios the driver was built against, each played by the provisioner,
the attacher and the kubelets against one controller and real node plugins in their own mount
namespaces."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.harness import TOPOLOGY_KEY, Attacher, Cluster, Node, Pod, Provisioner
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, mounts_under
from tests.support.processes import wait_for

C = grpc.StatusCode
Mode = pb.VolumeCapability.AccessMode
MiB = h.MiB


def assert_node_clean(cluster: Cluster, node: str) -> None:
    """The node holds no mount under its kubelet directory (in its own namespace)."""
    assert not cluster.kubelet(node).stale_mounts(), cluster.kubelet(node).stale_mounts()


@pytest.mark.parametrize(
    "mode",
    [Mode.SINGLE_NODE_WRITER, Mode.SINGLE_NODE_MULTI_WRITER],
    ids=["SINGLE_NODE_WRITER", "SINGLE_NODE_MULTI_WRITER"],
)
def test_s1_rwo_two_pods_on_one_node_share_one_file(
    make_cluster: Callable[..., Cluster], workdir: Path, mode: Mode.Mode.ValueType
) -> None:
    """RWO (Kubernetes sends SINGLE_NODE_MULTI_WRITER when the driver advertises it, else
    SINGLE_NODE_WRITER): two pods on one node mount the volume and read and write one file."""
    cluster = make_cluster(nodes=("node-a",))
    kubelet = cluster.kubelet("node-a")
    pv = cluster.provisioner.provision("pvc-s1", h.mount_cap("ext4", mode), 64 * MiB)
    ctx = cluster.attacher.attach(pv, "node-a")
    kubelet.mount_device(pv, ctx)
    first, second = Pod("pod-1"), Pod("pod-2")
    kubelet.setup(first, pv, ctx)
    kubelet.setup(second, pv, ctx)

    kubelet.write(first, pv, "shared.txt", b"written by pod-1\n")
    kubelet.append(second, pv, "shared.txt", b"appended by pod-2\n")
    kubelet.append(first, pv, "shared.txt", b"appended by pod-1\n")
    expected = b"written by pod-1\nappended by pod-2\nappended by pod-1\n"
    assert kubelet.read(first, pv, "shared.txt") == expected
    assert kubelet.read(second, pv, "shared.txt") == expected
    # Both pods see one filesystem: the staging mount and two bind mounts, in node-a only.
    assert len(kubelet.stale_mounts()) == 3
    assert not mounts_under(workdir), "nothing shows in the host's namespace"

    kubelet.teardown(second, pv)
    assert kubelet.read(first, pv, "shared.txt") == expected, "pod-1 keeps the volume"
    kubelet.teardown(first, pv)
    kubelet.unmount_device(pv)
    cluster.attacher.detach(pv, "node-a")
    cluster.provisioner.delete(pv)
    assert_node_clean(cluster, "node-a")
    assert not loops_backed_under(workdir)
    assert pv.handle not in cluster.list_volumes()


def test_s2_rwop_second_pod_is_refused(make_cluster: Callable[..., Cluster], workdir: Path) -> None:
    """RWOP (SINGLE_NODE_SINGLE_WRITER): one pod at a time; the second gets FAILED_PRECONDITION,
    and gets the volume once the first is gone."""
    cluster = make_cluster(nodes=("node-a", "node-b"))
    kubelet = cluster.kubelet("node-a")
    pv = cluster.provisioner.provision(
        "pvc-s2", h.mount_cap("ext4", Mode.SINGLE_NODE_SINGLE_WRITER), 32 * MiB
    )
    ctx = cluster.attacher.attach(pv, "node-a")
    kubelet.mount_device(pv, ctx)
    first, second = Pod("pod-1"), Pod("pod-2")
    kubelet.setup(first, pv, ctx)
    kubelet.write(first, pv, "owner", b"pod-1")

    err = h.expect_code(C.FAILED_PRECONDITION, kubelet.setup, second, pv, ctx)
    assert "SINGLE_NODE_SINGLE_WRITER" in (err.details() or "")
    assert str(kubelet.target_path(second, pv)) not in kubelet.stale_mounts()
    # Nor can another node take it.
    h.expect_code(C.FAILED_PRECONDITION, cluster.attacher.attach, pv, "node-b")

    kubelet.teardown(first, pv)
    kubelet.setup(second, pv, ctx)
    assert kubelet.read(second, pv, "owner") == b"pod-1"
    kubelet.teardown(second, pv)
    kubelet.unmount_device(pv)
    cluster.attacher.detach(pv, "node-a")
    cluster.provisioner.delete(pv)
    assert_node_clean(cluster, "node-a")
    assert not loops_backed_under(workdir)


def test_s3_pod_moves_to_another_node_with_its_data(
    make_cluster: Callable[..., Cluster], workdir: Path
) -> None:
    """A pod moves from node-a to node-b: full teardown on node-a, then setup on node-b; the
    data is intact (checksum)."""
    cluster = make_cluster()
    a, b = cluster.kubelet("node-a"), cluster.kubelet("node-b")
    pv = cluster.provisioner.provision("pvc-s3", h.mount_cap("ext4"), 64 * MiB)
    pod = Pod("pod-s3")
    payload = os.urandom(8 * MiB)

    ctx_a = cluster.attacher.attach(pv, "node-a")
    a.mount_device(pv, ctx_a)
    a.setup(pod, pv, ctx_a)
    a.write(pod, pv, "data.bin", payload)
    assert cluster.list_volumes()[pv.handle] == ["node-a"]

    a.teardown(pod, pv)
    a.unmount_device(pv)
    cluster.attacher.detach(pv, "node-a")
    assert_node_clean(cluster, "node-a")
    assert not loops_backed_under(workdir), "node-a let go of its loop device"
    assert cluster.list_volumes()[pv.handle] == []

    ctx_b = cluster.attacher.attach(pv, "node-b")
    assert int(ctx_b["generation"]) > int(ctx_a["generation"])
    b.mount_device(pv, ctx_b)
    b.setup(pod, pv, ctx_b)
    got = b.read(pod, pv, "data.bin")
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest()
    assert cluster.list_volumes()[pv.handle] == ["node-b"]
    assert cluster.ledger_holders() == {pv.handle: ["node-b"]}
    assert not a.stale_mounts(), "node-b's mounts are not visible on node-a"

    b.teardown(pod, pv)
    b.unmount_device(pv)
    cluster.attacher.detach(pv, "node-b")
    cluster.provisioner.delete(pv)
    assert_node_clean(cluster, "node-b")
    assert not loops_backed_under(workdir)


# A pod's process that holds one file open and appends to it, fsyncing each line, until a write
# fails; it then prints the errno and exits 3. It shows what fencing does to a pod that survived
# its node's freeze.
WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
print("open", flush=True)
n = 0
while True:
    try:
        os.write(fd, b"line %d\\n" % n)
        os.fsync(fd)
    except OSError as e:
        print("errno", e.errno, flush=True)
        sys.exit(3)
    n += 1
    time.sleep(0.05)
"""


def test_s4_frozen_node_is_force_detached_and_fenced_when_it_thaws(
    make_cluster: Callable[..., Cluster], workdir: Path
) -> None:
    """node-a freezes (SIGSTOP: its plugin and its pod). node-b's attach is refused until an
    operator force-detaches; node-b then gets the data intact; node-a fences itself when it
    thaws, and its pod's next write fails with EIO."""
    cluster = make_cluster()
    a, b = cluster.kubelet("node-a"), cluster.kubelet("node-b")
    node_a = cluster.nodes["node-a"]
    pv = cluster.provisioner.provision("pvc-s4", h.mount_cap("ext4"), 64 * MiB)
    pod_a, pod_b = Pod("pod-on-a"), Pod("pod-on-b")
    payload = os.urandom(4 * MiB)

    ctx_a = cluster.attacher.attach(pv, "node-a")
    a.mount_device(pv, ctx_a)
    a.setup(pod_a, pv, ctx_a)
    a.write(pod_a, pv, "data.bin", payload)
    writer = subprocess.Popen(
        [
            *node_a.ns.prefix(),
            sys.executable,
            "-c",
            WRITER,
            str(a.target_path(pod_a, pv) / "journal.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "open"

        # While node-a holds it, node-b's attach is refused, naming the holder.
        err = h.expect_code(C.FAILED_PRECONDITION, cluster.attacher.attach, pv, "node-b")
        assert "node-a" in (err.details() or "")

        # node-a freezes: plugin and pod alike.
        node_a.plugin.kill(signal.SIGSTOP)
        os.kill(writer.pid, signal.SIGSTOP)
        grace = ["--node-grace", "2"]
        reason = ["--reason", "node-a frozen"]
        refused = cluster.force_detach(pv, "node-a", *reason, *grace)
        assert refused.returncode == 1 and "grace period" in refused.stderr, refused
        h.expect_code(C.FAILED_PRECONDITION, cluster.attacher.attach, pv, "node-b")
        time.sleep(2.2)  # the frozen node's heartbeat ages past the grace period
        forced = cluster.force_detach(pv, "node-a", *reason, *grace)
        assert forced.returncode == 0 and "RISK" in forced.stdout, forced

        # The attacher's next try for node-b succeeds, with a newer fencing token.
        ctx_b = cluster.attacher.attach(pv, "node-b")
        assert int(ctx_b["generation"]) > int(ctx_a["generation"])
        b.mount_device(pv, ctx_b)
        b.setup(pod_b, pv, ctx_b)
        digest = hashlib.sha256(payload).hexdigest()
        assert hashlib.sha256(b.read(pod_b, pv, "data.bin")).hexdigest() == digest

        # node-a thaws: its plugin fences the volume within its fence interval.
        node_a.plugin.kill(signal.SIGCONT)
        wait_for(lambda: not a.stale_mounts(), 10, "node-a to unmount its staging and target")
        assert "FENCING volume" in node_a.plugin.log()
        # The pod's process thaws after the fence: its open file now answers EIO.
        os.kill(writer.pid, signal.SIGCONT)
        out, _ = writer.communicate(timeout=10)
        assert writer.returncode == 3 and out.split() == ["errno", "5"], out
        # Its loop device goes once that last opener is gone; node-b's stays.
        wait_for(lambda: len(loops_backed_under(workdir)) == 1, 10, "node-a's loop to go")
    finally:
        if writer.poll() is None:
            os.kill(writer.pid, signal.SIGCONT)
            writer.kill()
            writer.wait(timeout=10)

    # A late kubelet retry on node-a with the revoked token is refused.
    err = h.expect_code(C.FAILED_PRECONDITION, a.mount_device, pv, ctx_a)
    assert "node-b" in (err.details() or "")
    assert hashlib.sha256(b.read(pod_b, pv, "data.bin")).hexdigest() == digest

    def fenced_in_audit() -> bool:
        return "fenced" in cluster.ledger("audit", "--volume", pv.handle).stdout

    wait_for(fenced_in_audit, 10, "the fence event in the audit trail")
    audit = cluster.ledger("audit", "--volume", pv.handle).stdout
    actions = [line.split()[3] for line in audit.splitlines()[1:]]
    assert actions == ["publish", "force-detach", "publish", "fenced"], audit
    assert cluster.ledger_holders() == {pv.handle: ["node-b"]}

    b.teardown(pod_b, pv)
    b.unmount_device(pv)
    cluster.attacher.detach(pv, "node-b")
    cluster.provisioner.delete(pv)
    assert_node_clean(cluster, "node-a")
    assert_node_clean(cluster, "node-b")
    assert not loops_backed_under(workdir)


def _topology(node: Node) -> pb.Topology:
    """What the kubelet's node registration publishes (CSINode), from NodeGetInfo."""
    info = node.plugin.call("node", "NodeGetInfo", pb.NodeGetInfoRequest())
    assert info.node_id == node.node_id
    return pb.Topology(segments=dict(info.accessible_topology.segments))


def test_s5_wait_for_first_consumer_lands_on_the_selected_node(
    make_local_node: Callable[[str], Node], workdir: Path
) -> None:
    """WaitForFirstConsumer with a local pool per node: the scheduler picked node-b, so the
    provisioner asks with node-b preferred (requisite: both nodes); the volume lands on node-b.
    The same request with only node-b requisite, sent to node-a's driver, is RESOURCE_EXHAUSTED."""
    node_a, node_b = make_local_node("node-a"), make_local_node("node-b")
    topo_a, topo_b = _topology(node_a), _topology(node_b)
    assert dict(topo_b.segments) == {TOPOLOGY_KEY: node_b.node_id}
    cap = h.mount_cap("ext4")

    selected = pb.TopologyRequirement(requisite=[topo_a, topo_b], preferred=[topo_b, topo_a])
    pv = Provisioner(node_b.plugin).provision("pvc-s5", cap, 32 * MiB, selected)
    assert [dict(t.segments) for t in pv.volume.accessible_topology] == [dict(topo_b.segments)]

    only_b = pb.TopologyRequirement(requisite=[topo_b], preferred=[topo_b])
    err = h.expect_code(
        C.RESOURCE_EXHAUSTED, Provisioner(node_a.plugin).provision, "pvc-s5", cap, 32 * MiB, only_b
    )
    assert "node-a" in (err.details() or "")
    listed = node_a.plugin.call("controller", "ListVolumes", pb.ListVolumesRequest())
    assert not listed.entries, "node-a's pool got nothing"

    # The pod starts on node-b, where the volume lives.
    pod = Pod("pod-s5")
    attacher = Attacher(node_b.plugin, {"node-b": node_b.node_id})
    ctx = attacher.attach(pv, "node-b")
    node_b.kubelet.mount_device(pv, ctx)
    node_b.kubelet.setup(pod, pv, ctx)
    node_b.kubelet.write(pod, pv, "hello", b"node-b")
    assert node_b.kubelet.read(pod, pv, "hello") == b"node-b"
    node_b.kubelet.teardown(pod, pv)
    node_b.kubelet.unmount_device(pv)
    attacher.detach(pv, "node-b")
    Provisioner(node_b.plugin).delete(pv)
    assert not node_b.kubelet.stale_mounts()
    assert not loops_backed_under(workdir)
