"""The Kubernetes roles, played in order against real driver processes.

- the **provisioner** (external-provisioner): CreateVolume / DeleteVolume on the controller;
- the **attacher** (external-attacher): ControllerPublishVolume / ControllerUnpublishVolume;
- the **kubelet** of each node: NodeStage at
  `<kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256(volume handle)>/globalmount`, NodePublish at
  `<kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount` (block volumes: the kubelet's
  `volumeDevices/staging/<pv>` and `volumeDevices/publish/<pv>/<uid>`), teardown in reverse.

Every role retries ABORTED (another operation on the volume is in flight) and UNAVAILABLE (the
plugin is down or restarting) with a bounded exponential backoff, as the sidecars and the kubelet
do; any other code is the answer and goes back to the test.

Each node gets a mount namespace of its own that outlives its node plugin, as a real node's host
namespace does: a kill -9 of the plugin leaves the node's mounts in place, and the restarted plugin
joins the same namespace. The pods' reads and writes run inside that namespace through nsenter.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath import csi_requests as rq
from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, DriverProcess
from tests.processes import UNSHARE, ledger_cli, mount_points
from tests.static_dev import static_dev

DRIVER_NAME = "loop.hostpath.csi.dev"
TOPOLOGY_KEY = f"topology.{DRIVER_NAME}/node"
C = grpc.StatusCode
RETRYABLE = frozenset({C.ABORTED, C.UNAVAILABLE})
# One RPC may run mkfs; a frozen plugin must still not hang a test forever.
RPC_TIMEOUT = 60.0


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential backoff: about 20 s of retries before the role gives up."""

    initial: float = 0.02
    factor: float = 2.0
    ceiling: float = 0.5
    attempts: int = 50


class NodeNamespace:
    """A private mount namespace held open by a sleeping process, standing in for a node's host
    mount namespace: plugins come and go, the namespace and its mounts stay. With static_dev,
    its /dev is a kind node's: a tmpfs with copies of a few device nodes (tests/static_dev.py)."""

    def __init__(self, name: str, *, static_dev: bool = False) -> None:
        self.name = name
        self.static_dev = static_dev
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            # setpriv sets the parent-death signal in the child itself (it survives the exec of
            # unshare and sleep), so the holder dies with the test process even if that is
            # killed. A Python preexec_fn would run between fork and exec in a process with gRPC
            # threads, which is not safe.
            [
                "setpriv",
                "--pdeathsig",
                "KILL",
                "--",
                *(static_dev() if self.static_dev else UNSHARE),
                "sleep",
                "infinity",
            ],
        )
        # unshare(2) has run once the process has exec'ed sleep; before that, nsenter would
        # join the test's own namespace.
        deadline = time.monotonic() + 10
        while Path(f"/proc/{self.proc.pid}/comm").read_text().strip() != "sleep":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the namespace holder of {self.name} did not start")
            time.sleep(0.005)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def prefix(self) -> list[str]:
        """The command prefix that runs a program inside this namespace."""
        return ["nsenter", "-t", str(self.pid), "-m", "--"]

    def run(self, *argv: str, data: bytes | None = None) -> bytes:
        out = subprocess.run(
            [*self.prefix(), *argv], input=data, capture_output=True, timeout=60, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"{argv} in {self.name}'s namespace exited {out.returncode}: "
                f"{out.stderr.decode(errors='replace')}"
            )
        return out.stdout

    def mounts_under(self, root: Path) -> list[str]:
        prefix = str(root).rstrip("/") + "/"
        return [m for m in mount_points(self.pid) if m.startswith(prefix) or m == str(root)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=20)


class Plugin:
    """A driver process and the client of its current incarnation."""

    def __init__(self, name: str, handle: DriverProcess, client: Client) -> None:
        self.name = name
        self.handle = handle
        self.client = client
        self.restarts = 0
        # Run right after each new incarnation answers, before any retry reaches it.
        self.after_restart: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        assert self.handle.proc is not None
        return self.handle.proc.pid

    def alive(self) -> bool:
        return self.handle.proc is not None and self.handle.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with self._lock:
            self.handle.kill(sig)

    @property
    def state_dir(self) -> Path:
        args = self.handle.args
        return Path(args[args.index("--state-dir") + 1])

    def crash(self, lose: str = "") -> None:
        """kill -9, and with lose set, lose the state directory before anything restarts the
        plugin: "empty" deletes it (a new or mistyped --state-dir, a pod moved to a node whose
        hostPath is empty), "truncated" leaves a zero-byte state.db (a torn disk, a bad
        backup). The pool is untouched: it is the truth the restart rebuilds from."""
        with self._lock:
            self.handle.kill(signal.SIGKILL)
            if lose == "empty":
                shutil.rmtree(self.state_dir, ignore_errors=True)
            elif lose == "truncated":
                (self.state_dir / "state.db").write_bytes(b"")
                for suffix in ("-wal", "-shm"):
                    (self.state_dir / f"state.db{suffix}").unlink(missing_ok=True)
            elif lose:
                raise ValueError(f"unknown state loss {lose!r}")

    def restart(self) -> None:
        """Start a new incarnation; it has reconciled by the time its socket answers."""
        with self._lock:
            self._restart_locked()

    def _restart_locked(self) -> None:
        if self.alive():
            self.handle.kill(signal.SIGKILL)
        self.client.close()
        self.client = self.handle.start()
        self.restarts += 1
        for hook in self.after_restart:
            hook()

    def ensure_running(self) -> bool:
        """What the container runtime does for a crashed plugin: start it again. True if it had
        to."""
        with self._lock:
            if self.alive():
                return False
            self._restart_locked()
            return True

    def call(self, service: str, method: str, request: Any, backoff: Backoff = Backoff()) -> Any:
        delay = backoff.initial
        for attempt in range(backoff.attempts):
            stub = getattr(self.client, service)
            try:
                return getattr(stub, method)(request, timeout=RPC_TIMEOUT)
            except grpc.RpcError as e:
                code = e.code()
                if code not in RETRYABLE or attempt == backoff.attempts - 1:
                    raise
                if code == C.UNAVAILABLE:
                    self.ensure_running()
            time.sleep(delay)
            delay = min(delay * backoff.factor, backoff.ceiling)
        raise AssertionError("unreachable: the last attempt raises or returns")

    def log(self) -> str:
        return self.handle.log()


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
        return self.plugin.call(
            "node",
            "NodeGetVolumeStats",
            rq.volume_stats(pv.handle, path, self.staging_path(pv)),
        )

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
