"""`--fresh-backoff` offline: the kubelet restarted before a cell is the one that restarts its
target, and a systemd unit's cell restarts nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.k8s.faults import main as faults_main
from tests.k8s.faults.harness import Harness, lease_renewed_since
from tests.k8s.faults.killer import Target


class Nodes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def exec(self, node: str, argv: list[str], timeout: float = 120) -> str:
        self.calls.append((node, list(argv)))
        return ""


class Kube:
    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any]:
        assert (kind, namespace) == ("Lease", "kube-node-lease")
        return {"spec": {"renewTime": "2999-01-01T00:00:00.000001Z"}}


def harness(nodes: Nodes) -> Harness:
    ctx: Any = SimpleNamespace(nodes=nodes, kube=Kube(), node_ready=lambda node: True)
    args = argparse.Namespace(back_timeout=5)
    return Harness(args, ctx, None, None, "cp", {}, Path("/nonexistent"))  # type: ignore[arg-type]


def test_the_kubelet_that_restarts_a_container_is_restarted_and_waited_for() -> None:
    nodes = Nodes()
    assert harness(nodes).forget_backoff(Target("etcd", "cp"))
    assert nodes.calls == [("cp", ["systemctl", "restart", "kubelet"])]
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


def test_the_kubelet_is_back_when_its_lease_is_renewed_after_the_restart() -> None:
    lease = {"spec": {"renewTime": "2026-12-06T22:35:12.500000Z"}}
    at = 1796596512.0  # 2026-12-06T22:35:12Z
    assert lease_renewed_since(lease, at)
    assert not lease_renewed_since(lease, at + 1)
    assert not lease_renewed_since({"spec": {}}, at)
    assert not lease_renewed_since(None, at)
