"""A second real cluster, CLUSTER_NAME=t2, beside the others: up, a pod on each node, down.

Brings Kubernetes up on this machine (root, a minute or so), so it runs only when asked:
CLUSTER_TESTS=1 .venv/bin/python -m pytest tests/k8s/cluster -m real. Unlike the default cluster's
own tests it runs while other clusters are up (the default one, or one of another name), and is
the check that it may: it never touches them, and compares what each has on the host (its
settings, links, addresses, routes, iptables rules, namespace pins, control-plane processes, API
server's answer) before t2 comes up, while t2 is up and after t2 is down. (Someone taking one of
them down or up meanwhile fails that comparison.) After make cluster-down CLUSTER_NAME=t2: no
process, mount, loop device, namespace, link, route, iptables rule, cgroup or directory of t2 is
left, .run/t2 holds its logs only, and the host's mount-point directories are as t2 found them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import test_cluster_real
from tests.k8s.cluster.test_cluster_real import _pod, _running, _sh

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "tools" / "cluster"
NAME = "t2"
# A third, for the test of two clusters of this test's own.
SECOND = "t2b"
DEFAULT_ROOT = Path("/var/lib/csi-hostpath-cluster")

# Marked as the default cluster's tests are: real, slow, and only with CLUSTER_TESTS=1 as root.
pytestmark = test_cluster_real.pytestmark


def _named(
    name: str, *args: str, check: bool = True, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run a command for the cluster `name`, with no cluster setting of the caller's (so nothing
    can name the default cluster by accident)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_")}
    result = subprocess.run(
        list(args),
        check=False,
        capture_output=True,
        text=True,
        env={**env, "CLUSTER_NAME": name, **extra},
        timeout=600,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}: {result.stderr}")
    return result


def _t2(*args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
    return _named(NAME, *args, check=check, **extra)


def _settings(name: str = NAME) -> dict[str, str]:
    out = _named(name, "bash", str(CLUSTER / "up.sh"), "--settings").stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def _others() -> dict[str, dict[str, str]]:
    """The settings of every other cluster up on the machine (the default one among them), as
    their own files record them."""
    found = {}
    named = Path("/var/lib").glob("chp-cluster-*/state/settings.env")
    for f in [DEFAULT_ROOT / "state/settings.env", *named]:
        if not f.exists():
            continue
        name = next(
            line.split("=", 1)[1]
            for line in f.read_text().splitlines()
            if line.startswith("CLUSTER_NAME=")
        )
        if name not in (NAME, SECOND):
            found[name] = _settings(name)
    return found


def _state_of(other: dict[str, str]) -> dict[str, Any]:
    """What another cluster has on the host: its settings, links, addresses, routes, iptables
    rules, network namespace pins, control-plane processes and API server's answer."""
    root, bridge = other["CLUSTER_ROOT"], other["CLUSTER_BRIDGE"]
    names = {bridge, *(other[f"NODE_{i}_VETH"] for i in range(1, int(other["CLUSTER_NODES"]) + 1))}
    links = _sh("ip", "-o", "link", "show").stdout.splitlines()
    rules = _sh("iptables", "-w", "-S").stdout + _sh("iptables", "-w", "-t", "nat", "-S").stdout
    mounts = _sh("findmnt", "-rn", "-o", "TARGET").stdout.splitlines()
    control_plane = {}
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        pid = int(Path(other["CLUSTER_RUN"], "pids", f"{name}.pid").read_text())
        control_plane[name] = (pid, _running(pid))
    ready = _sh(
        "curl",
        "-sk",
        "--max-time",
        "5",
        f"https://127.0.0.1:{other['CLUSTER_API_PORT']}/readyz",
        check=False,
    )
    return {
        "settings": Path(root, "state/settings.env").read_text(),
        # Index, name and flags of each of its links (node.sh down/up keeps them).
        "links": sorted(
            " ".join(line.split()[:3])
            for line in links
            if line.split()[1].rstrip(":").split("@")[0] in names
        ),
        "addresses": _sh("ip", "-o", "addr", "show", "dev", bridge).stdout,
        "routes": sorted(
            r for r in _sh("ip", "route").stdout.splitlines() if f"dev {bridge} " in r
        ),
        "rules": sorted(r for r in rules.splitlines() if f"--comment {other['CLUSTER_TAG']} " in r),
        # The network namespace pins (a node taken down and up again remounts its ns/mnt).
        "pins": sorted(m for m in mounts if m.startswith(f"{root}/") and "/ns/net" in m),
        "control_plane": control_plane,
        "api": ready.stdout,
    }


def _others_state() -> dict[str, dict[str, Any]]:
    return {name: _state_of(other) for name, other in _others().items()}


def _t2_things(settings: dict[str, str]) -> dict[str, list[str]]:
    """Whatever of t2's is on the host, by its names (none of which another cluster uses)."""
    root, tag = settings["CLUSTER_ROOT"], settings["CLUSTER_TAG"]
    prefix = settings["CLUSTER_VETH"]
    links = _sh("ip", "-o", "link", "show").stdout.splitlines()
    rules = _sh("iptables", "-w", "-S").stdout + _sh("iptables", "-w", "-t", "nat", "-S").stdout
    nets = (settings["CLUSTER_NET_PREFIX"] + ".", settings["CLUSTER_POD_PREFIX"] + ".")
    return {
        "links": [line for line in links if settings["CLUSTER_BRIDGE"] in line or prefix in line],
        "routes": [r for r in _sh("ip", "route").stdout.splitlines() if r.startswith(nets)],
        "rules": [r for r in rules.splitlines() if f"--comment {tag} " in r],
        "mounts": [
            m
            for m in _sh("findmnt", "-rn", "-o", "TARGET").stdout.splitlines()
            if m == root or m.startswith(f"{root}/")
        ],
        "loops": [
            line
            for line in _sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout.splitlines()
            if root in line
        ],
        "cgroups": [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{tag}")],
        "root": [root] if Path(root).exists() else [],
        "run": sorted(p.name for p in Path(settings["CLUSTER_RUN"]).iterdir() if p.name != "logs")
        if Path(settings["CLUSTER_RUN"]).exists()
        else [],
    }


def _mount_points() -> set[str]:
    return {
        p
        for p in (
            "/var/lib/kubelet",
            "/var/lib/containerd",
            "/etc/cni/net.d",
            "/var/lib/csi-hostpath",
        )
        if Path(p).exists()
    }


def _kubectl(settings: dict[str, str], *args: str, stdin: str | None = None) -> Any:
    run = Path(settings["CLUSTER_RUN"])
    result = subprocess.run(
        [str(run / "bin" / "kubectl"), "--kubeconfig", settings["KUBECONFIG"], *args],
        check=True,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )
    return json.loads(result.stdout) if "json" in args else result.stdout


def _node(
    node: str, *cmd: str, check: bool = True, name: str = NAME
) -> subprocess.CompletedProcess[str]:
    return _named(name, "bash", str(CLUSTER / "node.sh"), "exec", node, "--", *cmd, check=check)


def _run_pods(settings: dict[str, str], prefix: str = "probe-") -> None:
    """A pause pod on each node of the cluster, Running, with an address of its node's range."""
    nodes = [settings[f"NODE_{i}_NAME"] for i in range(1, int(settings["CLUSTER_NODES"]) + 1)]
    for node in nodes:
        _kubectl(settings, "apply", "-f", "-", stdin=_pod(node).replace("probe-", prefix))
    for i, node in enumerate(nodes, 1):
        for _ in range(120):
            pod = _kubectl(settings, "-n", "default", "get", "pod", f"{prefix}{node}", "-o", "json")
            if pod.get("status", {}).get("phase") == "Running":
                break
            time.sleep(1)
        assert pod["status"]["phase"] == "Running", pod.get("status")
        assert pod["spec"]["nodeName"] == node
        assert pod["status"]["podIP"].startswith(settings[f"NODE_{i}_POD_CIDR"].rsplit(".", 1)[0])


@pytest.fixture
def named_clusters() -> Iterator[list[str]]:
    """Names of clusters a test brings up, each taken down afterwards, whatever happened."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in reversed(names):
            _named(name, "bash", str(CLUSTER / "down.sh"), check=False)


def _up(named_clusters: list[str], name: str) -> dict[str, str]:
    """make cluster-up CLUSTER_NAME=name; its settings as recorded (with the slot it got)."""
    settings = _settings(name)
    assert settings["CLUSTER_ROOT"] != str(DEFAULT_ROOT)
    if Path(settings["CLUSTER_ROOT"], "state").exists():
        pytest.skip(f"{name} is up already: make cluster-down CLUSTER_NAME={name} first")
    named_clusters.append(name)
    up = _named(name, "make", "-C", str(ROOT), "-s", "cluster-up", f"CLUSTER_NAME={name}")
    assert up.stdout.strip().splitlines()[-1] == str(ROOT / ".run" / name / "kubeconfig")
    return _settings(name)


def test_a_second_cluster_runs_beside_the_others_and_leaves_nothing(
    named_clusters: list[str],
) -> None:
    others_before = _others_state()
    paths_before = _mount_points()
    settings = _up(named_clusters, NAME)
    run = Path(settings["CLUSTER_RUN"])
    pids = {f.name: int(f.read_text()) for f in (run / "pids").glob("*.pid")}
    nodes = [settings["NODE_1_NAME"], settings["NODE_2_NAME"]]
    assert nodes == [f"{NAME}-worker", f"{NAME}-worker2"]
    namespaces = set()
    for node in nodes:
        init = pids[f"{node}.init.pid"]
        for kind in ("net", "mnt"):
            namespaces.add(os.readlink(f"/proc/{init}/ns/{kind}").split("[")[1].rstrip("]"))

    items = _kubectl(settings, "get", "nodes", "-o", "json")["items"]
    assert sorted(n["metadata"]["name"] for n in items) == nodes
    for n in items:
        assert {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "True"
    _run_pods(settings)
    for node in nodes:
        # t2's own API server through kube-proxy's service address, from inside the node; the
        # default cluster's network is not reachable from it.
        assert (
            _node(node, "curl", "-sk", "--max-time", "5", "https://10.96.0.1/readyz").stdout == "ok"
        )
        assert _node(node, "ip", "route", "get", "10.250.0.1", check=False).returncode != 0

    # One cluster of a name: t2 again from elsewhere is refused; from here it is up already.
    other = _t2("bash", str(CLUSTER / "up.sh"), check=False, CLUSTER_RUN="/tmp/elsewhere/t2")
    assert other.returncode == 1 and f"the cluster '{NAME}' of {run} is up" in other.stderr
    again = _t2("bash", str(CLUSTER / "up.sh"))
    assert "already up" in again.stderr
    assert _others_state() == others_before

    down = _t2("make", "-C", str(ROOT), "-s", "cluster-down", f"CLUSTER_NAME={NAME}")
    assert down.returncode == 0, down.stderr
    assert not [name for name, pid in pids.items() if _running(pid)]
    left = _t2_things(settings)
    assert left == {
        "links": [],
        "routes": [],
        "rules": [],
        "mounts": [],
        "loops": [],
        "cgroups": [],
        "root": [],
        "run": [],
    }
    live = set()
    for kind in ("net", "mnt"):
        live |= set(_sh("lsns", "-n", "-o", "NS", "-t", kind).stdout.split())
    assert not namespaces & live
    assert _others_state() == others_before
    # The host's directories the nodes mount over are as t2 found them.
    assert _mount_points() == paths_before


# The directories the nodes' mounts sit on: a cluster that made them hands them over when it goes
# down before another (removing a mount point takes its mounts away in every mount namespace).
NODE_MOUNTS = (
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/etc/cni/net.d",
    "/var/log",
    "/var/lib/csi-hostpath",
)


def _node_mounts(settings: dict[str, str], name: str) -> dict[str, list[str]]:
    found = {}
    for i in range(1, int(settings["CLUSTER_NODES"]) + 1):
        node = settings[f"NODE_{i}_NAME"]
        out = _node(node, "findmnt", "-rn", "-o", "TARGET,SOURCE", name=name).stdout
        found[node] = sorted(line for line in out.splitlines() if line.split()[0] in NODE_MOUNTS)
    return found


def test_a_cluster_going_down_leaves_the_mounts_of_one_still_up(named_clusters: list[str]) -> None:
    paths_before = _mount_points()
    first = _up(named_clusters, NAME)
    second = _up(named_clusters, SECOND)
    mounts = _node_mounts(second, SECOND)
    assert all(len(node) == len(NODE_MOUNTS) for node in mounts.values()), mounts
    made = Path(first["CLUSTER_ROOT"], "state/created-dirs")
    made_dirs = set(made.read_text().split()) if made.exists() else set()

    _named(NAME, "make", "-C", str(ROOT), "-s", "cluster-down", f"CLUSTER_NAME={NAME}")
    assert _t2_things(first)["root"] == []
    # The second cluster's nodes keep every mount, and run new pods on them.
    assert _node_mounts(second, SECOND) == mounts
    handed = Path(second["CLUSTER_ROOT"], "state/created-dirs")
    assert made_dirs <= (set(handed.read_text().split()) if handed.exists() else set())
    _run_pods(second, "after-")

    _named(SECOND, "make", "-C", str(ROOT), "-s", "cluster-down", f"CLUSTER_NAME={SECOND}")
    assert _mount_points() == paths_before
