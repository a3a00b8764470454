"""Two nodes on one kernel: no node plugin adopts, detaches, counts or reports the other's devices.

Two nodes on one kernel, as kind's nodes are: every node plugin sees the other's loop devices
in /sys/block (and, once it has scanned them, has their nodes in its /dev), and must never
adopt, detach, count or report them, its restart's reconcile included; each node's capacity and
volumes are its own pool's.

Each node is a kind node's shape: a mount namespace whose /dev is a tmpfs with copies of a few
device nodes (tests/support/static_dev.py), its plugin a `--mode all` driver in local pool scope,
its pool a tmpfs of its own size. node-a stages three volumes and node-b two, more loop devices
than either /dev had nodes for. node-b then restarts with its state lost: its reconcile can't
see node-a's mounts (another mount namespace), so a device of node-a's taken for node-b's would
look unused and be detached. Then node-a restarts with its records.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.naming import loop_tag_prefix
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.linux.loop import LinuxLoop
from tests.e2e.harness import Node
from tests.support import helpers as h
from tests.support.processes import free_port, metric, wait_for

MiB = 1 << 20
POOLS = {"node-a": 256, "node-b": 512}  # MiB: each node's capacity must be its own
STAGED = {"node-a": 3, "node-b": 2}
CAP = h.mount_cap("ext4")


def _pool(workdir: Path, name: str) -> Path:
    pool = workdir / f"{name}-pool"
    pool.mkdir()
    size = f"size={POOLS[name]}m"
    subprocess.run(["mount", "-t", "tmpfs", "-o", size, f"csihp-{name}", str(pool)], check=True)
    return pool  # the workdir fixture unmounts it


def _devices(node: Node) -> dict[str, tuple[str, int, int]]:
    """tag -> (device, backing file's st_dev and inode) of the node's loop devices, by a scan
    of the kernel from the host (the test's own view, not the driver's)."""
    found = LinuxLoop().list(loop_tag_prefix(node.node_id))
    return {d.tag: (d.path, d.backing_dev, d.backing_inode) for d in found}


def _held(node: Node) -> int:
    """What the node's last NodeGetInfo counted as its own loop devices (its debug log)."""
    node.plugin.client.node.NodeGetInfo(pb.NodeGetInfoRequest())
    counted = re.findall(r"volume limit \d+: (\d+) held", _whole_log(node))
    return int(counted[-1])


def _whole_log(node: Node) -> str:
    return node.plugin.handle.log_path.read_text(errors="replace")


def _capacity(node: Node) -> int:
    reply = node.plugin.client.controller.GetCapacity(
        pb.GetCapacityRequest(volume_capabilities=[CAP])
    )
    return int(reply.available_capacity)


def _check_each_its_own(
    nodes: dict[str, Node],
    pools: dict[str, Path],
    ports: dict[str, int],
    volumes: dict[str, list[str]],
) -> None:
    for name, node in nodes.items():
        devices = _devices(node)
        assert len(devices) == STAGED[name], (name, devices)
        for _, dev, inode in devices.values():
            assert (dev, inode) in _pool_files(pools[name]), (
                f"{name} holds a device of another pool"
            )
        assert metric(ports[name], "csi_hostpath_loop_devices_attached") == STAGED[name]
        assert _held(node) == STAGED[name]
        listed = node.plugin.client.controller.ListVolumes(pb.ListVolumesRequest()).entries
        assert sorted(e.volume.volume_id for e in listed) == sorted(volumes[name])
        # The pool's size less what its volumes may still grow into: never the other pool's.
        assert _capacity(node) <= POOLS[name] * MiB - STAGED[name] * 16 * MiB
    assert _capacity(nodes["node-b"]) > POOLS["node-a"] * MiB


def _pool_files(pool: Path) -> set[tuple[int, int]]:
    files = (pool / "volumes").glob("*.img")
    return {(f.stat().st_dev, f.stat().st_ino) for f in files}


def _healthy(node: Node, volume_id: str, staging: Path) -> bool:
    stats = node.plugin.client.node.NodeGetVolumeStats(
        pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(staging))
    )
    return not stats.volume_condition.abnormal


def test_two_nodes_on_one_kernel_keep_to_their_own_loop_devices(
    make_local_node: Callable[..., Node], workdir: Path
) -> None:
    pools = {name: _pool(workdir, name) for name in POOLS}
    ports = {name: free_port() for name in POOLS}
    nodes = {
        name: make_local_node(
            name,
            "--pool-dir",
            str(pools[name]),
            "--metrics-address",
            f"127.0.0.1:{ports[name]}",
            static_dev=True,
        )
        for name in POOLS
    }
    volumes: dict[str, list[str]] = {name: [] for name in POOLS}
    staged: dict[str, list[tuple[str, Path]]] = {name: [] for name in POOLS}
    for i in range(max(STAGED.values())):
        for name, node in nodes.items():  # interleaved: the two nodes' devices mix numbers
            if i >= STAGED[name]:
                continue
            staging = node.kubelet.root / f"staging-{i}"
            vol = h.staged(node.plugin.client, staging, f"{name}-{i}", node.node_id)
            volumes[name].append(vol.volume_id)
            staged[name].append((vol.volume_id, staging))
    _check_each_its_own(nodes, pools, ports, volumes)
    a, b = nodes["node-a"], nodes["node-b"]
    a_devices = _devices(a)

    # node-b restarts with its state lost, once its heartbeat lists what it staged.
    layout = PoolLayout(pools["node-b"])

    def b_beat_lists_its_volumes() -> bool:
        beat = layout.heartbeat(b.node_id)
        return beat is not None and set(beat.volumes) == set(volumes["node-b"])

    wait_for(b_beat_lists_its_volumes, 30, "node-b's heartbeat to list its volumes")
    b.plugin.crash(lose="empty")
    b.plugin.restart()
    log = _whole_log(b)
    assert log.count("RE-ADOPTED") == STAGED["node-b"], log[-4000:]
    for volume_id in volumes["node-a"]:
        assert volume_id not in log, f"node-b's log names node-a's volume {volume_id}"
    assert _devices(a) == a_devices, "node-a's devices changed under node-b's reconcile"
    for volume_id, staging in staged["node-a"]:
        assert str(staging) in a.ns.mounts_under(a.kubelet.root)
        assert _healthy(a, volume_id, staging)
    _check_each_its_own(nodes, pools, ports, volumes)

    # node-a restarts with its records: its reconcile leaves node-b's devices alone.
    b_devices = _devices(b)
    a.plugin.restart()
    assert _devices(b) == b_devices
    assert _devices(a) == a_devices
    for volume_id, staging in staged["node-b"]:
        assert _healthy(b, volume_id, staging)
    _check_each_its_own(nodes, pools, ports, volumes)

    # Each node's teardown detaches its own devices only.
    for volume_id, staging in staged["node-a"]:
        h.unstage(a.plugin.client, volume_id, staging)
    wait_for(lambda: not _devices(a), 30, "node-a's devices to go")
    assert _devices(b) == b_devices
    for volume_id, staging in staged["node-b"]:
        assert _healthy(b, volume_id, staging)
        h.unstage(b.plugin.client, volume_id, staging)
    wait_for(lambda: not _devices(b), 30, "node-b's devices to go")
