"""Fixtures that build clusters out of the `spawn` and `workdir` fixtures of tests/conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Cluster, Kubelet, Node, unique_node_id
from tests.e2e.node_runtime import NodeNamespace, Plugin

# Fast heartbeats and fence checks keep the multi-node scenarios short.
HEARTBEAT = "0.3"
FENCE_INTERVAL = "1"


@pytest.fixture
def namespaces() -> Iterator[Callable[..., NodeNamespace]]:
    """Node mount namespaces, all released when the test ends (which drops their mounts once
    the node plugins inside have stopped too)."""
    made: list[NodeNamespace] = []

    def new(name: str, *, static_dev: bool = False) -> NodeNamespace:
        ns = NodeNamespace(name, static_dev=static_dev)
        ns.start()
        made.append(ns)
        return ns

    yield new
    for ns in made:
        ns.stop()


@pytest.fixture
def plugins() -> Iterator[list[Plugin]]:
    """Every Plugin a test made; their current clients are closed at the end (`spawn` closes
    only the first client of each process and stops the processes)."""
    made: list[Plugin] = []
    yield made
    for plugin in made:
        plugin.client.close()


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:8]


def _node(
    spawn: Any,
    workdir: Path,
    ns: NodeNamespace,
    plugins: list[Plugin],
    node_id: str,
    name: str,
    *flags: str,
) -> Node:
    handle, client = spawn(name, *flags, node_id=node_id, prefix=ns.prefix())
    plugin = Plugin(name, handle, client)
    plugins.append(plugin)
    kubelet = Kubelet(node_id, workdir / "nodes" / name / "kubelet", plugin, ns)
    return Node(name, node_id, ns, plugin, kubelet)


@pytest.fixture
def make_cluster(
    spawn: Any,
    workdir: Path,
    namespaces: Callable[..., NodeNamespace],
    plugins: list[Plugin],
    run_id: str,
) -> Callable[..., Cluster]:
    """One `--mode controller` plugin and a `--mode node` plugin per node, sharing one pool (the
    Kubernetes deployment of this driver); each node in its own mount namespace."""

    def make(
        nodes: tuple[str, ...] = ("node-a", "node-b"),
        controller_flags: tuple[str, ...] = (),
        node_flags: Mapping[str, tuple[str, ...]] | None = None,
    ) -> Cluster:
        """node_flags: more `serve` flags for one node, after the common ones (the last wins)."""
        shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
        beat = ["--heartbeat-interval", HEARTBEAT]
        handle, client = spawn(
            "ctrl",
            "--mode",
            "controller",
            *shared,
            *beat,
            *controller_flags,
            node_id=f"controller-{run_id}",
        )
        controller = Plugin("controller", handle, client)
        plugins.append(controller)
        cluster = Cluster(workdir, controller)
        # The grace period S4's force-detach uses: a node plugin refuses to stage a volume that
        # another node's fresh heartbeat still lists, and "fresh" must mean the same to both.
        flags = [
            "--mode",
            "node",
            *shared,
            *beat,
            "--fence-interval",
            FENCE_INTERVAL,
            "--node-grace",
            "2",
        ]
        for name in nodes:
            node_id = unique_node_id(name, run_id)
            ns = namespaces(name)
            extra = (node_flags or {}).get(name, ())
            cluster.nodes[name] = _node(spawn, workdir, ns, plugins, node_id, name, *flags, *extra)
        return cluster

    return make


@pytest.fixture
def make_local_node(
    spawn: Any,
    workdir: Path,
    namespaces: Callable[..., NodeNamespace],
    plugins: list[Plugin],
    run_id: str,
) -> Callable[..., Node]:
    """A `--mode all` driver in local pool scope: its own pool, controller and node in one;
    extra flags go to its `serve`. With static_dev, the node's /dev is a kind node's (a tmpfs
    with copies of a few device nodes, tests/support/static_dev.py)."""

    def make(name: str, *extra: str, static_dev: bool = False) -> Node:
        flags = ["--mode", "all", "--pool-scope", "local", "--heartbeat-interval", HEARTBEAT]
        node_id = unique_node_id(name, run_id)
        ns = namespaces(name, static_dev=static_dev)
        return _node(spawn, workdir, ns, plugins, node_id, name, *flags, *extra)

    return make
