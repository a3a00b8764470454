"""The Kubernetes roles, played in order against real driver processes.

- the **provisioner** (external-provisioner): CreateVolume / DeleteVolume on the controller;
- the **attacher** (external-attacher): ControllerPublishVolume / ControllerUnpublishVolume;
- the **kubelet** of each node: NodeStage at
  `<kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256(volume handle)>/globalmount`, NodePublish at
  `<kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount` (block volumes: the kubelet's
  `volumeDevices/staging/<pv>` and `volumeDevices/publish/<pv>/<uid>`), teardown in reverse.

Every role calls through node_runtime.Plugin, which retries ABORTED and UNAVAILABLE with a bounded
exponential backoff, as the sidecars and the kubelet do; any other code is the answer and goes back
to the test. Each node's mount namespace (node_runtime.NodeNamespace) outlives its node plugin, and
the pods' reads and writes run inside it.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from tests.e2e.node_runtime import NodeNamespace, Plugin
from tests.support.processes import ledger_cli

DRIVER_NAME = "loop.hostpath.csi.dev"
TOPOLOGY_KEY = f"topology.{DRIVER_NAME}/node"


@dataclass(frozen=True)
class PV:
    """A provisioned volume as Kubernetes keeps it: the PV's name and the CSI volume."""

    name: str
    volume: pb.Volume
    cap: pb.VolumeCapability

    @property
    def handle(self) -> str:
        return str(self.volume.volume_id)

    @property
    def block(self) -> bool:
        return self.cap.WhichOneof("access_type") == "block"


@dataclass(frozen=True)
class Pod:
    uid: str


class Provisioner:
    def __init__(self, controller: Plugin) -> None:
        self.controller = controller

    def provision(
        self,
        name: str,
        cap: pb.VolumeCapability,
        size: int,
        requirements: pb.TopologyRequirement | None = None,
    ) -> PV:
        request = rq.create_volume(name, cap, size, requirements=requirements)
        response = self.controller.call("controller", "CreateVolume", request)
        return PV(name, response.volume, cap)

    def delete(self, pv: PV) -> None:
        self.controller.call("controller", "DeleteVolume", rq.delete_volume(pv.handle))


class Attacher:
    """node arguments are the nodes' names in the test; ids maps them to the plugins' node IDs."""

    def __init__(self, controller: Plugin, ids: dict[str, str] | None = None) -> None:
        self.controller = controller
        self.ids = ids or {}

    def attach(self, pv: PV, node: str, readonly: bool = False) -> dict[str, str]:
        response = self.controller.call(
            "controller",
            "ControllerPublishVolume",
            rq.controller_publish(
                pv.handle, self.ids.get(node, node), pv.cap, readonly, pv.volume.volume_context
            ),
        )
        return dict(response.publish_context)

    def detach(self, pv: PV, node: str) -> None:
        self.controller.call(
            "controller",
            "ControllerUnpublishVolume",
            rq.controller_unpublish(pv.handle, self.ids.get(node, node)),
        )


class Kubelet:
    def __init__(self, node_id: str, root: Path, plugin: Plugin, ns: NodeNamespace) -> None:
        self.node_id = node_id
        self.root = root
        self.plugin = plugin
        self.ns = ns
        self.stuck: list[subprocess.Popen[bytes]] = []

    # ----- the paths the kubelet hands to CSI drivers -----
    def staging_path(self, pv: PV) -> Path:
        if pv.block:
            return self.root / "plugins/kubernetes.io/csi/volumeDevices/staging" / pv.name
        digest = hashlib.sha256(pv.handle.encode()).hexdigest()
        return self.root / "plugins/kubernetes.io/csi" / DRIVER_NAME / digest / "globalmount"

    def target_path(self, pod: Pod, pv: PV) -> Path:
        if pv.block:  # the driver bind-mounts the device node onto this file
            return self.root / "plugins/kubernetes.io/csi/volumeDevices/publish" / pv.name / pod.uid
        return self.root / "pods" / pod.uid / "volumes/kubernetes.io~csi" / pv.name / "mount"

    # ----- MountDevice / SetUp / TearDown / UnmountDevice -----
    def mount_device(self, pv: PV, publish_context: dict[str, str]) -> None:
        staging = self.staging_path(pv)
        staging.mkdir(parents=True, exist_ok=True)
        self.plugin.call(
            "node",
            "NodeStageVolume",
            rq.node_stage(pv.handle, staging, pv.cap, publish_context, pv.volume.volume_context),
        )

    def setup(
        self, pod: Pod, pv: PV, publish_context: dict[str, str], readonly: bool = False
    ) -> Path:
        target = self.target_path(pod, pv)
        # The kubelet makes the PV's directory; the driver makes `mount` itself.
        target.parent.mkdir(parents=True, exist_ok=True)
        self.plugin.call(
            "node",
            "NodePublishVolume",
            rq.node_publish(
                pv.handle,
                self.staging_path(pv),
                target,
                pv.cap,
                readonly,
                publish_context,
                pv.volume.volume_context,
            ),
        )
        return target

    def teardown(self, pod: Pod, pv: PV) -> None:
        self.plugin.call(
            "node",
            "NodeUnpublishVolume",
            rq.node_unpublish(pv.handle, self.target_path(pod, pv)),
        )

    def unmount_device(self, pv: PV) -> None:
        staging = self.staging_path(pv)
        self.plugin.call(
            "node",
            "NodeUnstageVolume",
            rq.node_unstage(pv.handle, staging),
        )
        # The kubelet removes the directory it made for the device mount.
        for d in (staging, staging.parent):
            try:
                d.rmdir()
            except OSError:
                break

    def stats(self, pv: PV, path: Path) -> pb.NodeGetVolumeStatsResponse:
        reply: pb.NodeGetVolumeStatsResponse = self.plugin.call(
            "node",
            "NodeGetVolumeStats",
            rq.volume_stats(pv.handle, path, self.staging_path(pv)),
        )
        return reply

    # ----- the pod's I/O, inside the node's namespace -----
    def write(self, pod: Pod, pv: PV, name: str, data: bytes) -> None:
        """Write and fsync: once this returns the write is acknowledged and synced. Name ""
        writes a block volume's device node itself, from its first byte."""
        path = self.target_path(pod, pv) / name
        self.ns.run("sh", "-c", 'cat > "$1" && sync "$1"', "sh", str(path), data=data)

    def append(self, pod: Pod, pv: PV, name: str, data: bytes) -> None:
        path = self.target_path(pod, pv) / name
        self.ns.run("sh", "-c", 'cat >> "$1" && sync "$1"', "sh", str(path), data=data)

    def read(self, pod: Pod, pv: PV, name: str, size: int = 0) -> bytes:
        """The file's bytes (its first size bytes if size is given); name "" reads a block
        volume's device node itself."""
        path = str(self.target_path(pod, pv) / name)
        if size:
            return self.ns.run("head", "-c", str(size), path)
        return self.ns.run("cat", path)

    def stale_mounts(self) -> list[str]:
        return self.ns.mounts_under(self.root)

    def writable(self, path: Path, seconds: float) -> bool:
        """Does a write with fsync into directory `path` finish within `seconds`, inside the
        node's namespace? The only sure test that a filesystem is not frozen: mountinfo does
        not show a freeze, and a writer on a frozen filesystem sleeps in D state. Such a writer
        can't be reaped before the thaw, so it is kept in `stuck` for `thaw_all`."""
        probe = str(path / ".chaos-writable")
        writer = subprocess.Popen(
            [*self.ns.prefix(), "sh", "-c", 'echo x > "$1" && sync "$1" && rm -f "$1"', "sh",
             probe],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            return writer.wait(timeout=seconds) == 0
        except subprocess.TimeoutExpired:
            writer.kill()
            self.stuck.append(writer)
            return False

    def thaw_all(self, paths: list[Path]) -> None:
        """Test cleanup that trusts no driver: thaw each path (`fsfreeze -u`; an error means it
        was not frozen), then reap the writers a freeze held."""
        for path in paths:
            subprocess.run(
                [*self.ns.prefix(), "fsfreeze", "-u", str(path)],
                capture_output=True,
                timeout=30,
                check=False,
            )
        while self.stuck:
            self.stuck.pop().wait(timeout=30)


@dataclass
class Node:
    """name is what the test calls the node; node_id is unique to the test run (see
    `unique_node_id`)."""

    name: str
    node_id: str
    ns: NodeNamespace
    plugin: Plugin
    kubelet: Kubelet


def unique_node_id(name: str, run: str) -> str:
    """Loop devices are global to the kernel and the driver tags them by node ID, so drivers
    with one node ID on one machine (another test run, a benchmark) meet each other's devices
    (see test_driver_bugs.py). A node ID of our own per test run keeps concurrent runs apart."""
    return f"{name}-{run}"


@dataclass
class Cluster:
    workdir: Path
    controller: Plugin
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def ids(self) -> dict[str, str]:
        return {name: node.node_id for name, node in self.nodes.items()}

    def name_of(self, node_id: str) -> str:
        return next((n for n, i in self.ids.items() if i == node_id), node_id)

    @property
    def provisioner(self) -> Provisioner:
        return Provisioner(self.controller)

    @property
    def attacher(self) -> Attacher:
        return Attacher(self.controller, self.ids)

    def kubelet(self, node: str) -> Kubelet:
        return self.nodes[node].kubelet

    def plugins(self) -> list[Plugin]:
        return [self.controller, *(n.plugin for n in self.nodes.values())]

    def ledger(self, *args: str) -> subprocess.CompletedProcess[str]:
        return ledger_cli(self.workdir, *args)

    def force_detach(self, pv: PV, node: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.ledger("force-detach", pv.handle, "--node", self.ids[node], *flags)

    def ledger_holders(self) -> dict[str, list[str]]:
        """volume -> node names, as `csi-hostpath ledger list` prints them."""
        out = self.ledger("list")
        assert out.returncode == 0, out.stderr
        holders: dict[str, list[str]] = {}
        for line in out.stdout.splitlines()[1:]:
            volume, node = line.split()[:2]
            holders.setdefault(volume, []).append(self.name_of(node))
        return holders

    def list_volumes(self) -> dict[str, list[str]]:
        """volume -> published_node_ids (as node names), every page of ListVolumes."""
        found: dict[str, list[str]] = {}
        token = ""
        while True:
            page = self.controller.call(
                "controller",
                "ListVolumes",
                pb.ListVolumesRequest(max_entries=50, starting_token=token),
            )
            for entry in page.entries:
                nodes = [self.name_of(n) for n in entry.status.published_node_ids]
                found[entry.volume.volume_id] = nodes
            token = page.next_token
            if not token:
                return found
