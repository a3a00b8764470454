"""The real cluster from binaries: make cluster-up, look at it, make cluster-down, nothing left.

Brings Kubernetes up on this machine (root, about half a minute each), so it runs only when
asked: CLUSTER_TESTS=1 .venv/bin/python -m pytest tests/k8s/cluster -m real. It never runs while a
cluster is already up (it would take that one down).

What it checks while the cluster is up: two Ready nodes; a pod running on each, with an address
of its node's pod range; the API server's service address reached from inside each node (what
kube-proxy does for hostNetwork pods and the sidecars); no route out of any node; a mount made
inside one node seen by neither the other node nor the host; a loop device on a file of the
shared pool; a node taken down and brought back (node.sh down/up) running pods again. After
cluster-down, and after a cluster-up killed with SIGKILL half-way: no process, mount, loop
device, namespace, link, iptables rule, cgroup or directory of the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "tools" / "cluster"
RUN = ROOT / ".run" / "cluster"
CLUSTER_ROOT = Path("/var/lib/csi-hostpath-cluster")
NODES = ("csi-hostpath-worker", "csi-hostpath-worker2")
# Where the cluster's own mounts and backing files are (the nodes see theirs at the usual paths).
OURS = (str(CLUSTER_ROOT), "/var/lib/kubelet", "/var/lib/csi-hostpath/")
POD_RANGES = {"csi-hostpath-worker": "10.244.1.", "csi-hostpath-worker2": "10.244.2."}

pytestmark = [
    pytest.mark.real,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("CLUSTER_TESTS") != "1",
        reason="brings a real cluster up: set CLUSTER_TESTS=1 (as root)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the cluster needs root"),
]


def _sh(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(args), check=False, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
    return result


def _node(node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _sh("bash", str(CLUSTER / "node.sh"), "exec", node, "--", *cmd, check=check)


def _kubectl(*args: str) -> Any:
    out = _sh(str(RUN / "bin" / "kubectl"), "--kubeconfig", str(RUN / "kubeconfig"), *args).stdout
    return json.loads(out) if "-o" in args and "json" in args else out


@dataclass(frozen=True)
class HostState:
    """What the host has of the kinds the cluster makes, to compare before and after."""

    links: frozenset[str]
    iptables: str
    mounts: frozenset[str]
    loops: frozenset[str]
    cgroups: frozenset[str]
    paths: frozenset[str]


def _host_state() -> HostState:
    links = _sh("ip", "-o", "link", "show").stdout.splitlines()
    mounts = _sh("findmnt", "-rn", "-o", "TARGET,SOURCE").stdout.splitlines()
    loops = _sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout.splitlines()
    rules = _sh("iptables", "-w", "-S").stdout + _sh("iptables", "-w", "-t", "nat", "-S").stdout
    return HostState(
        links=frozenset(line.split(":")[1].strip().split("@")[0] for line in links),
        iptables=rules,
        mounts=frozenset(m for m in mounts if m.startswith(OURS) or "csi-hostpath-cluster" in m),
        loops=frozenset(loop for loop in loops if loop.split()[-1].startswith(OURS)),
        cgroups=frozenset(str(p) for p in Path("/sys/fs/cgroup").glob("*/csi-hostpath-cluster")),
        paths=frozenset(
            p
            for p in ("/var/lib/kubelet", "/var/lib/csi-hostpath", str(CLUSTER_ROOT))
            if Path(p).exists()
        ),
    )


def _recorded_pids() -> dict[str, int]:
    # A file up.sh was killed while writing may be empty.
    pids = {f.name: f.read_text().strip() for f in (RUN / "pids").glob("*.pid")}
    return {name: int(pid) for name, pid in pids.items() if pid}


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _assert_nothing_left(before: HostState, pids: dict[str, int], namespaces: set[str]) -> None:
    after = _host_state()
    assert not [name for name, pid in pids.items() if _running(pid)]
    assert after.links == before.links
    assert after.iptables == before.iptables
    assert after.mounts == before.mounts
    assert after.loops == before.loops
    assert not after.cgroups
    assert after.paths == before.paths
    live = set()
    for kind in ("net", "mnt"):
        live |= set(_sh("lsns", "-n", "-o", "NS", "-t", kind).stdout.split())
    assert not namespaces & live


def _node_namespaces() -> set[str]:
    found = set()
    for node in NODES:
        pid = int((RUN / "pids" / f"{node}.init.pid").read_text())
        for kind in ("net", "mnt"):
            link = os.readlink(f"/proc/{pid}/ns/{kind}")  # "net:[4026532...]"
            found.add(link.split("[")[1].rstrip("]"))
    return found


@pytest.fixture
def quiet_host() -> Iterator[HostState]:
    if (CLUSTER_ROOT / "state").exists():
        pytest.skip("a cluster is up already: make cluster-down first")
    before = _host_state()
    try:
        yield before
    finally:
        _sh("bash", str(CLUSTER / "down.sh"), check=False)


def _pod(node: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"probe-{node}", "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "pause",
                        "image": "registry.k8s.io/pause:3.10.1",
                        "imagePullPolicy": "IfNotPresent",
                    }
                ],
            },
        }
    )


def _wait_running(name: str) -> dict[str, Any]:
    for _ in range(120):
        pod: dict[str, Any] = _kubectl("-n", "default", "get", "pod", name, "-o", "json")
        if pod.get("status", {}).get("phase") == "Running":
            return pod
        time.sleep(1)
    raise AssertionError(f"pod {name} not Running: {pod.get('status')}")


def test_cluster_up_two_nodes_isolated_then_down_leaves_nothing(quiet_host: HostState) -> None:
    up = _sh("make", "-C", str(ROOT), "-s", "cluster-up")
    assert up.stdout.strip().splitlines()[-1] == str(RUN / "kubeconfig")
    pids = _recorded_pids()
    namespaces = _node_namespaces()

    nodes = _kubectl("get", "nodes", "-o", "json")["items"]
    ready = {
        n["metadata"]["name"]: {c["type"]: c["status"] for c in n["status"]["conditions"]}
        for n in nodes
    }
    assert sorted(ready) == list(NODES)
    assert all(conditions["Ready"] == "True" for conditions in ready.values())

    for node in NODES:
        subprocess.run(
            [
                str(RUN / "bin" / "kubectl"),
                "--kubeconfig",
                str(RUN / "kubeconfig"),
                "apply",
                "-f",
                "-",
            ],
            input=_pod(node),
            check=True,
            text=True,
            capture_output=True,
        )
    for node in NODES:
        pod = _wait_running(f"probe-{node}")
        assert pod["spec"]["nodeName"] == node
        assert pod["status"]["podIP"].startswith(POD_RANGES[node])

    for node in NODES:
        # kube-proxy's DNAT of the service address, from the node's own network namespace.
        ready_z = _node(node, "curl", "-sk", "--max-time", "5", "https://10.96.0.1/readyz")
        assert ready_z.stdout == "ok"
        assert _node(node, "ip", "route", "show", "default").stdout == ""
        assert _node(node, "ip", "route", "get", "192.0.2.1", check=False).returncode != 0

    # A mount made inside the first node is seen by neither the second nor the host. (A tmpfs:
    # loop device numbers are shared with every other program on the kernel, and on a busy
    # machine a device can be taken back between losetup and mkfs.)
    first, second = NODES
    probe = "/var/lib/kubelet/isolation-probe"
    _node(first, "mkdir", "-p", probe)
    _node(first, "mount", "-t", "tmpfs", "isolation-probe", probe)
    assert _node(first, "findmnt", "-n", probe, check=False).returncode == 0
    assert _node(second, "findmnt", "-n", probe, check=False).returncode != 0
    assert _sh("findmnt", "-n", probe, check=False).returncode != 0
    # A loop device on a file of the shared pool, attached from inside a node, as the node
    # plugin attaches its volumes: the teardown detaches it.
    _node(first, "truncate", "-s", "32M", "/var/lib/csi-hostpath/pool/probe.img")
    _node(first, "losetup", "-f", "--show", "/var/lib/csi-hostpath/pool/probe.img")
    assert (CLUSTER_ROOT / "shared/pool/probe.img").exists()  # the pool is the same directory
    assert _node(second, "test", "-f", "/var/lib/csi-hostpath/pool/probe.img").returncode == 0

    # The first node goes down as a stopped kind node does: every process of it, and its
    # mounts with its mount namespace; it comes back up and runs pods again.
    _sh("bash", str(CLUSTER / "node.sh"), "down", first)
    assert not _running(pids[f"{first}.init.pid"])
    assert not _running(pids[f"{first}.kubelet.pid"])
    _sh("bash", str(CLUSTER / "node.sh"), "up", first)
    assert _node(first, "findmnt", "-n", probe, check=False).returncode != 0
    assert _node(first, "curl", "-s", "http://127.0.0.1:10248/healthz").stdout == "ok"
    subprocess.run(
        [str(RUN / "bin" / "kubectl"), "--kubeconfig", str(RUN / "kubeconfig"), "apply", "-f", "-"],
        input=_pod(first).replace("probe-", "again-"),
        check=True,
        text=True,
        capture_output=True,
    )
    assert _wait_running(f"again-{first}")["spec"]["nodeName"] == first
    pids |= _recorded_pids()
    namespaces |= _node_namespaces()

    down = _sh("make", "-C", str(ROOT), "-s", "cluster-down")
    assert down.returncode == 0, down.stderr
    _assert_nothing_left(quiet_host, pids, namespaces)


def test_a_cluster_up_killed_half_way_comes_down(quiet_host: HostState) -> None:
    up = subprocess.Popen(
        ["bash", str(CLUSTER / "up.sh")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Killed once the first node runs containerd: the control plane, a node's namespaces,
        # mounts, veth and cgroup are all there, the second node not yet.
        for _ in range(600):
            if (RUN / "pids" / f"{NODES[0]}.containerd.pid").exists() or up.poll() is not None:
                break
            time.sleep(0.1)
        assert up.poll() is None, "up.sh ended before it could be killed half-way"
    finally:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
    pids = _recorded_pids()
    assert "kube-apiserver.pid" in pids
    down = _sh("bash", str(CLUSTER / "down.sh"))
    assert down.returncode == 0, down.stderr
    _assert_nothing_left(quiet_host, pids, set())
    # And again: a teardown of nothing is not an error.
    assert _sh("bash", str(CLUSTER / "down.sh")).returncode == 0
