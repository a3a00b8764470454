"""Node-local pools on many machines.

Three node plugins, each the local-scope controller of its own pool (`--mode all --pool-scope
local`), each pool a tmpfs of 8 GiB of its own. Beside them run the models of
tests/e2e/k8s_models/placement/: a distributed external-provisioner per node (controller.go
checkNode and Provision, topology.go GenerateAccessibilityRequirements with strict topology,
capacity.go's GetCapacity per node) and the kube-scheduler's VolumeBinding capacity filter
(binder.go hasEnoughCapacity). The drivers are real processes on real gRPC sockets; the Kubernetes
side is the model.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.naming import snapshot_home
from tests.conftest import Client, DriverProcess
from tests.e2e.harness import unique_node_id
from tests.e2e.k8s_models.objects import Api, Claim, Node
from tests.e2e.k8s_models.placement.cluster import ManyMachines
from tests.e2e.k8s_models.placement.provisioner import CLASS, TOPOLOGY_KEY, NodeProvisioner
from tests.e2e.k8s_models.placement.scheduler import ERR_REASON_NOT_ENOUGH_SPACE
from tests.support import helpers as h
from tests.support.kernel import is_root
from tests.support.processes import free_port, metric, wait_for

pytestmark = pytest.mark.skipif(not is_root(), reason="mounts a tmpfs per node: needs root")
GiB = 1 << 30
NAMES = ("a", "b", "c")


@dataclass
class Machine:
    name: str
    node_id: str
    pool: Path
    handle: DriverProcess
    client: Client


def _pool(workdir: Path, name: str) -> Path:
    root = workdir / f"pool-{name}"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g", "tmpfs", str(root)], check=True)
    return root  # the workdir fixture unmounts it


def _start(spawn: Any, workdir: Path, name: str, node_id: str, *flags: str) -> Machine:
    pool = workdir / f"pool-{name}"
    handle, client = spawn(
        name,
        "--pool-scope",
        "local",
        "--pool-dir",
        str(pool),
        "--heartbeat-interval",
        "0.3",
        *flags,
        node_id=node_id,
    )
    return Machine(name, node_id, pool, handle, client)


@pytest.fixture
def machines(spawn: Any, workdir: Path, run_id: str) -> Iterator[dict[str, Machine]]:
    made = {}
    for name in NAMES:
        _pool(workdir, name)
        made[name] = _start(spawn, workdir, name, unique_node_id(f"mm-{name}", run_id))
    yield made


@pytest.fixture
def cluster(machines: dict[str, Machine]) -> ManyMachines:
    api = Api()
    world = ManyMachines(api)
    for m in machines.values():
        # node-driver-registrar reports NodeGetInfo's topology; the kubelet labels the node.
        info = m.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
        api.nodes[m.node_id] = Node(m.node_id, labels=dict(info.accessible_topology.segments))
        world.provisioners[m.node_id] = NodeProvisioner(api, m.node_id, m.client)
    world.refresh_capacity()
    return world


def _volumes(m: Machine) -> list[Any]:
    return list(m.client.controller.ListVolumes(pb.ListVolumesRequest()).entries)


def test_six_claims_of_3gib_land_two_per_node_and_a_seventh_waits_with_a_reason(
    machines: dict[str, Machine], cluster: ManyMachines
) -> None:
    api = cluster.api
    for c in api.capacities.values():
        # 8 GiB each, less the 8 MiB reserve and the pool's own small files.
        assert 8 * GiB - 16 * (1 << 20) < c.capacity <= 8 * GiB
    placed = {}
    for i in range(6):
        claim = Claim(f"data-{i}", 3 * GiB, CLASS)
        api.claims[claim.name] = claim
        placed[claim.name] = cluster.settle(claim)
    per_node = {
        m.node_id: sum(1 for n in placed.values() if n == m.node_id) for m in machines.values()
    }
    assert per_node == {m.node_id: 2 for m in machines.values()}, placed
    for m in machines.values():
        listed = _volumes(m)
        assert len(listed) == 2
        for entry in listed:
            assert [dict(t.segments) for t in entry.volume.accessible_topology] == [
                {TOPOLOGY_KEY: m.node_id}
            ]
    for pv in api.volumes.values():
        assert pv.node_affinity == [
            {TOPOLOGY_KEY: api.claims[pv.claim].annotations["volume.kubernetes.io/selected-node"]}
        ]

    seventh = Claim("data-6", 3 * GiB, CLASS)
    api.claims[seventh.name] = seventh
    assert cluster.settle(seventh) is None
    events = api.events_for("data-6")
    assert [e.reason for e in events] == ["FailedScheduling"]
    assert events[0].message == f"0/3 nodes are available: 3 {ERR_REASON_NOT_ENOUGH_SPACE}."
    assert not seventh.volume_name and sum(len(_volumes(m)) for m in machines.values()) == 6
    # The drivers keep the same rule on their own: asked directly, each one refuses.
    for m in machines.values():
        err = h.expect_code(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            h.create,
            m.client,
            "direct",
            h.mount_cap("ext4"),
            3 * GiB,
        )
        assert "can promise" in (err.details() or "")


def test_a_restore_lands_on_the_snapshots_node_and_elsewhere_is_resource_exhausted(
    machines: dict[str, Machine], cluster: ManyMachines
) -> None:
    api = cluster.api
    source = Claim("source", GiB, CLASS)
    api.claims[source.name] = source
    home = cluster.settle(source)
    assert home is not None
    holder = next(m for m in machines.values() if m.node_id == home)
    # csi-snapshotter runs per node too; it asks the source's own driver.
    snap = holder.client.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=api.volumes[source.volume_name].handle, name="s1")
    ).snapshot
    assert snapshot_home(snap.snapshot_id) == home

    # Without a hint the scheduler prefers the emptier nodes, not the snapshot's: the restore is
    # RESOURCE_EXHAUSTED there, naming the snapshot's node, and the claim is rescheduled.
    blind = Claim("restore-blind", GiB, CLASS, snapshot_handle=snap.snapshot_id)
    api.claims[blind.name] = blind
    assert cluster.settle(blind, rounds=2) is None
    failed = [e for e in api.events_for(blind.name) if e.reason == "ProvisioningFailed"]
    assert failed and all("rescheduling" in e.message and home in e.message for e in failed)
    assert "volume.kubernetes.io/selected-node" not in blind.annotations
    # Asked on each other node directly: RESOURCE_EXHAUSTED with the snapshot's node named.
    for m in machines.values():
        if m.node_id == home:
            continue
        err = h.expect_code(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            m.client.controller.CreateVolume,
            pb.CreateVolumeRequest(
                name="direct-restore",
                volume_capabilities=[h.mount_cap("ext4")],
                volume_content_source=pb.VolumeContentSource(
                    snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snap.snapshot_id)
                ),
            ),
        )
        assert home in (err.details() or "")

    # The documented flow (docs/kind-many-machines.md): the consumer's node affinity names the
    # node after "@" in the snapshot handle, so the restore is provisioned there, first time.
    pinned = Claim(
        "restore-pinned",
        GiB,
        CLASS,
        snapshot_handle=snap.snapshot_id,
        pod_affinity={TOPOLOGY_KEY: snap.snapshot_id.split("@", 1)[1]},
    )
    api.claims[pinned.name] = pinned
    assert cluster.settle(pinned) == home
    assert [e.reason for e in api.events_for(pinned.name)] == ["ProvisioningSucceeded"]
    assert api.volumes[pinned.volume_name].node_affinity == [{TOPOLOGY_KEY: home}]


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "csi_hostpath", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=workdir,
    )


def test_a_removed_nodes_volumes_are_lost_and_one_is_deleted(
    spawn: Any, workdir: Path, machines: dict[str, Machine], cluster: ManyMachines
) -> None:
    api = cluster.api
    for i in range(3):
        claim = Claim(f"web-{i}", 3 * GiB, CLASS)
        api.claims[claim.name] = claim
        assert cluster.settle(claim) is not None
    gone = machines["c"]
    on_c = [pv for pv in api.volumes.values() if pv.node_affinity == [{TOPOLOGY_KEY: gone.node_id}]]
    assert len(on_c) == 1
    held = on_c[0]
    # Its pod was running there: the node took its own hold (as --self-publish does at NodeStage).
    h.publish(gone.client, held.handle, gone.node_id, h.mount_cap("ext4"))

    # The machine is removed: its plugin dies, and the node object goes.
    gone.client.close()
    gone.handle.kill(signal.SIGKILL)
    del api.nodes[gone.node_id]
    del cluster.provisioners[gone.node_id]

    state = ["--state-dir", str(workdir / "c-state"), "--pool-dir", str(gone.pool)]
    forgot = _cli(workdir, "node", "forget", gone.node_id, "--reason", "machine removed", *state)
    assert forgot.returncode == 0, forgot.stderr
    assert held.handle in forgot.stdout
    listed = _cli(workdir, "node", "list", *state)
    assert "LOST (forgotten by an operator: machine removed); 1 volume(s) lost" in listed.stdout
    inspected = _cli(workdir, "inspect", held.handle, "--json", *state)
    phases = {p["phase"]: p for p in json.loads(inspected.stdout)["phases"]}
    assert phases["node"]["state"] == "abnormal"
    doctor = _cli(workdir, "doctor", *state)
    assert "lost-volumes" in doctor.stdout and held.handle in doctor.stdout

    # Where the removed node's records are kept, a controller serves them: it reports the volume
    # lost, and DeleteVolume of it succeeds though the lost node still holds it.
    port = free_port()
    _, client = spawn(
        "c",
        "--mode",
        "controller",
        "--pool-scope",
        "local",
        "--pool-dir",
        str(gone.pool),
        "--metrics-address",
        f"127.0.0.1:{port}",
        node_id=gone.node_id,
    )
    # The gRPC socket answers a moment before the metrics endpoint listens.
    wait_for(lambda: _serving(port), 10, "the metrics endpoint")
    assert metric(port, "csi_hostpath_lost_volumes") == 1
    client.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=held.handle))
    assert metric(port, "csi_hostpath_lost_volumes") == 0
    audit = _cli(workdir, "ledger", "audit", "--volume", held.handle, *state)
    assert audit.stdout.count("delete-lost") == 2 and "machine removed" in audit.stdout

    # The Kubernetes side: the cleanup steps, then the claim, re-created unbound, lands on a
    # node that is still there and has room.
    steps = _cli(workdir, "node", "cleanup", gone.node_id)
    assert steps.returncode == 0 and "kubectl delete pv" in steps.stdout
    claim = api.claims[held.claim]
    del api.volumes[held.name]
    again = Claim(claim.name, claim.size, CLASS)
    api.claims[claim.name] = again
    cluster.refresh_capacity()
    assert cluster.settle(again) in {machines["a"].node_id, machines["b"].node_id}
