"""How a cell's kill is readied, offline: the back-off forgotten, the process aimed at.

`--fresh-backoff` restarts the kubelet that restarts the target (a systemd unit's cell restarts
nothing), and the kill is aimed at one process before the action (its pid and start time), one
`docker exec` after the trigger."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.k8s.faults import main as faults_main
from tests.k8s.faults.harness import Harness, lease_renewed_since
from tests.k8s.faults.hostside import start_time
from tests.k8s.faults.killer import Aim, Killer, Target, aimed_kill
from tests.k8s.faults.test_faults_offline import CRICTL_PS, FakeNodes


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


def test_an_aimed_kill_is_one_exec_of_that_very_process_and_a_missed_aim_is_taken_again() -> None:
    stat = "77 (etcd) S 1 77 77 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 12 0 424242 1 2\n"
    nodes = FakeNodes({
        ("cp", "crictl ps"): [json.dumps(CRICTL_PS)],
        ("cp", "crictl inspect"): [json.dumps({"info": {"pid": p}}) for p in (77, 78)],
        ("cp", "cat /proc/77/stat"): [stat],
        ("cp", "sh -c"): ["", RuntimeError("exit status 1")],
        ("cp", "kill -9"): [""],
    })  # fmt: skip
    killer = Killer(nodes, "csi-hostpath", lambda role, node: f"csi-hostpath-{role}")  # type: ignore[arg-type]
    aim = killer.aim(Target("etcd", "cp"))
    assert aim == Aim("ddd", 77, "424242")
    nodes.calls.clear()
    kill = killer.kill(Target("etcd", "cp"), aim)
    assert (kill.pid, kill.container) == (77, "ddd")
    assert nodes.calls == [("cp", ["sh", "-c", aimed_kill(aim)])]
    assert "424242" in aimed_kill(aim) and "kill -9 77" in aimed_kill(aim)
    again = killer.kill(Target("etcd", "cp"), aim)  # its start time differs now, or it is gone
    assert again.pid == 78 and nodes.calls[-1] == ("cp", ["kill", "-9", "78"])


def test_the_start_time_is_counted_after_the_commands_parenthesis() -> None:
    fields = " ".join(str(i) for i in range(3, 30))
    assert start_time(f"9 (a) b) c) {fields}") == "22"
