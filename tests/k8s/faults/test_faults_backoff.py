"""`--fresh-backoff` offline: the kubelet restarted before a cell is the one that restarts its
target, and a systemd unit's cell restarts nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.k8s.faults import main as faults_main
from tests.k8s.faults.harness import Harness
from tests.k8s.faults.killer import Target


class Nodes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def exec(self, node: str, argv: list[str], timeout: float = 120) -> str:
        self.calls.append((node, list(argv)))
        return "ok" if argv[0] == "curl" else ""


def harness(nodes: Nodes) -> Harness:
    ctx: Any = SimpleNamespace(nodes=nodes, node_ready=lambda node: True)
    args = argparse.Namespace(back_timeout=5)
    return Harness(args, ctx, None, None, "cp", {}, Path("/nonexistent"))  # type: ignore[arg-type]


def test_the_kubelet_that_restarts_a_container_is_restarted_and_waited_for() -> None:
    nodes = Nodes()
    assert harness(nodes).forget_backoff(Target("etcd", "cp"))
    assert nodes.calls[0] == ("cp", ["systemctl", "restart", "kubelet"])
    assert nodes.calls[1][0] == "cp" and "http://127.0.0.1:10248/healthz" in nodes.calls[1][1]
    nodes.calls.clear()
    assert harness(nodes).forget_backoff(Target("node-driver-registrar", "w1"))
    assert nodes.calls[0] == ("w1", ["systemctl", "restart", "kubelet"])


def test_a_units_cell_restarts_nothing() -> None:
    nodes = Nodes()
    assert not harness(nodes).forget_backoff(Target("kubelet", "w1"))
    assert not harness(nodes).forget_backoff(Target("containerd", "w1"))
    assert nodes.calls == []


def test_the_option_is_off_unless_asked() -> None:
    base = ["--list", "--cells", "etcd/create"]
    assert faults_main.parse_args(base).fresh_backoff is False
    assert faults_main.parse_args([*base, "--fresh-backoff"]).fresh_backoff is True
