"""The fault harness checked offline: no cluster, no docker, no root.

The fault harness (tests/k8s/faults) checked offline, no cluster, no docker, no root: the
matrix covers every component and phase (a cell, or named off the path with its reason) and
names the chart's own containers, the arguments, the chaos plan is a pure function of its seed,
`--list` touches nothing, the result table and grid, how a kill is found and sent, and when a
kill counts as landed in its phase."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart import chart_tool
from tests.k8s.experiments.chart import OWN_HELPERS
from tests.k8s.faults import main as faults_main
from tests.k8s.faults import matrix, results, schedule
from tests.k8s.faults.cellrun import await_trigger, namespace_of
from tests.k8s.faults.killer import Killer, Target, parse_pids, pick_containers, pid_of

REPO = Path(__file__).resolve().parents[3]
PHASES = [p.name for p in matrix.PHASES]


def test_every_component_and_phase_is_a_cell_or_off_the_path_with_a_reason() -> None:
    assert len(matrix.COMPONENTS) == 13 and len(PHASES) == 10
    cells = {c.id for c in matrix.cells()}
    off = {f"{c}/{p}": why for c, p, why in matrix.off_path()}
    for comp in matrix.COMPONENTS:
        for ph in PHASES:
            pair = f"{comp.name}/{ph}"
            assert (pair in cells) != (pair in off), pair
            if pair in off:
                assert len(off[pair]) > 15, pair
    assert len(cells) + len(off) == 130
    assert all(c.trigger in matrix.TRIGGERS for c in matrix.cells())
    assert all(p.trigger in matrix.TRIGGERS for p in matrix.PHASES)


def test_the_issues_components_and_phases_are_all_there() -> None:
    names = {c.name for c in matrix.COMPONENTS}
    assert names >= {
        "kube-apiserver",
        "etcd",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "containerd",
        "controller",
        "node-plugin",
        "csi-provisioner",
        "csi-attacher",
        "csi-resizer",
        "csi-snapshotter",
        "node-driver-registrar",
    }
    assert PHASES == [
        "create",
        "attach",
        "stage",
        "publish",
        "expand",
        "snapshot",
        "unpublish",
        "unstage",
        "detach",
        "delete",
    ]
    # Every component has a phase it is killed in; the API server and etcd are under them all.
    assert {c.component for c in matrix.cells()} == names
    assert {c.phase for c in matrix.cells() if c.component == "etcd"} == set(PHASES)
    assert "node-driver-registrar/snapshot" in {f"{c}/{p}" for c, p, _ in matrix.off_path()}


def test_the_cells_run_phase_by_phase() -> None:
    order = [PHASES.index(c.phase) for c in matrix.cells()]
    assert order == sorted(order)


def test_the_killed_containers_are_the_charts_own() -> None:
    """The release's containers the matrix kills exist under those names in the chart as the
    harness installs it (the registrar and probe from the driver's image, snapshots on)."""
    values: dict[str, Any] = {}
    for flag, kv in zip(OWN_HELPERS[::2], OWN_HELPERS[1::2], strict=True):
        assert flag == "--set"
        key, _, value = kv.partition("=")
        a, b, c = key.split(".")
        values.setdefault(a, {}).setdefault(b, {})[c] = value
    r = chart_tool.render(values, api_versions=[chart_tool.SNAPSHOT_API])
    pods = {
        "controller": r.one("StatefulSet")["spec"]["template"]["spec"]["containers"],
        "node": r.one("DaemonSet")["spec"]["template"]["spec"]["containers"],
    }
    for comp in matrix.COMPONENTS:
        if comp.kind == "container":
            assert comp.process in [c["name"] for c in pods[comp.pod]], comp


def test_the_kind_units_restart_what_is_killed() -> None:
    units = REPO / "tools" / "kind" / "node" / "files" / "etc" / "systemd" / "system"
    for comp in matrix.COMPONENTS:
        if comp.kind == "unit":
            text = (units / f"{comp.process}.service").read_text()
            assert "Restart=always" in text and "RestartSec=1" in text, comp.process


def test_cells_are_selected_by_component_and_phase() -> None:
    assert [c.id for c in matrix.select("kubelet/stage,etcd/create")] == [
        "etcd/create", "kubelet/stage"]  # fmt: skip
    assert {c.phase for c in matrix.select("kubelet")} == {
        "stage", "publish", "expand", "unpublish", "unstage", "detach"}  # fmt: skip
    assert {c.component for c in matrix.select("*/snapshot")} == {
        "kube-apiserver", "etcd", "controller", "node-plugin", "csi-snapshotter"}  # fmt: skip
    assert len(matrix.select("all")) == len(matrix.cells()) == 61
    with pytest.raises(ValueError, match="no cell: the freeze goes through the pool"):
        matrix.select("node-driver-registrar/snapshot")
    with pytest.raises(ValueError, match="no component 'registrar'"):
        matrix.select("registrar/stage")
    with pytest.raises(ValueError, match="no phase 'mount'"):
        matrix.select("kubelet/mount")


def test_the_scheduler_creates_through_wait_for_first_consumer_only() -> None:
    assert [c.id for c in matrix.cells() if c.wffc] == ["kube-scheduler/create"]


def test_arguments() -> None:
    a = faults_main.parse_args(["--kubeconfig", "/k"])
    assert a.kubeconfig == Path("/k") and len(a.selected) == 61 and a.modes == []
    a = faults_main.parse_args(["--kubeconfig", "/k", "--partition", "all"])
    assert a.selected == [] and a.modes == ["partition", "poweroff", "reboot"]
    a = faults_main.parse_args(["--kubeconfig", "/k", "--chaos", "30", "--seed", "7"])
    assert a.selected == [] and a.chaos == 30 and a.seed == 7
    a = faults_main.parse_args(["--kubeconfig", "/k", "--cells", "csi-resizer/*"])
    assert [c.id for c in a.selected] == ["csi-resizer/expand"]
    assert a.results.parent == REPO / ".run" / "faults"


def test_kubeconfig_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/from/env")
    assert faults_main.parse_args([]).kubeconfig == Path("/from/env")


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no kubeconfig
        ["--kubeconfig", "/k", "--chaos", "30"],  # no seed
        ["--kubeconfig", "/k", "--chaos", "0", "--seed", "1"],
        ["--kubeconfig", "/k", "--cells", "csi-attacher/stage"],
        ["--kubeconfig", "/k", "--partition", "flood"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(SystemExit) as e:
        faults_main.parse_args(argv)
    assert e.value.code == 2


def test_list_touches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"--list ran something: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(faults_main, "Kube", refuse)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert faults_main.main(["--list", "--chaos", "30", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "cells (61;" in out and "not cells (69;" in out
    assert "node-driver-registrar/snapshot" in out and "the freeze goes through the pool" in out
    assert "partition cases" in out and "reboot" in out
    assert "chaos plan, seed 7:" in out


def test_the_chaos_plan_is_a_function_of_its_seed() -> None:
    one = schedule.plan(7, 30, 5.0)
    assert schedule.plan(7, 30, 5.0) == one
    assert schedule.plan(8, 30, 5.0) != one
    assert one.as_json() == schedule.plan(7, 30, 5.0).as_json()
    json.dumps(one.as_json())


def test_the_chaos_plan_has_enough_faults_and_every_kind_of_claim() -> None:
    every = sorted(schedule.slots())
    for seed in (1, 2, 3):
        p = schedule.plan(seed, 30, 5.0)
        assert len(p.ticks) >= 300
        gaps = [b.at - a.at for a, b in zip(p.ticks, p.ticks[1:], strict=False)]
        assert all(2.5 <= g <= 7.5 for g in gaps) and p.ticks[-1].at < 30 * 60
        assert all(sorted(t.order) == every for t in p.ticks)
        assert {s.kind for s in p.lifecycles} == set(schedule.KINDS)
        assert {s.first for s in p.lifecycles} == {0, 1}
    with pytest.raises(ValueError):
        schedule.plan(1, 30, 0)


def test_every_component_is_a_chaos_target() -> None:
    assert {c for c, _ in schedule.slots()} == {c.name for c in matrix.COMPONENTS}
    assert {r for _, r in schedule.slots()} == set(schedule.ROLES)


def test_the_table_and_the_grid(tmp_path: Path) -> None:
    rows = [
        results.CellResult("etcd/create", "passed", 61.2, "in-phase", 23.0),
        results.CellResult("kubelet/stage", "FAILED", 300.4, "late", 4.0, "timed out\nmore"),
        results.CellResult("csi-resizer/expand", "skipped", 0.0, detail="not reached"),
    ]
    rows[1].violations.append({"kind": "leak", "detail": "x"})
    text = results.render(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["cell", "result", "landed", "back", "s", "seconds", "detail"]
    assert lines[3].split()[:5] == ["kubelet/stage", "FAILED", "late", "4", "300"]
    assert lines[3].endswith("timed out") and "more" not in text
    assert lines[-1].startswith("2 run, 1 passed, 1 failed, 1 skipped; 1 of the kills landed")
    g = results.grid(rows).splitlines()
    etcd = next(line for line in g if line.startswith("etcd "))
    assert etcd.split()[1:3] == ["ok", "."]
    kubelet = next(line for line in g if line.startswith("kubelet "))
    assert kubelet.split()[1:4] == ["-", "-", "FAIL"]
    out = tmp_path / "r" / "results.json"
    results.write(out, rows, {"argv": ["x"]})
    body = json.loads(out.read_text())
    assert [r["id"] for r in body["results"]] == [r.id for r in rows] and body["argv"] == ["x"]


CRICTL_PS = {
    "containers": [
        {"id": "aaa", "metadata": {"name": "csi-hostpath"}, "state": "CONTAINER_RUNNING",
         "labels": {"io.kubernetes.pod.namespace": "csi-hostpath",
                    "io.kubernetes.pod.name": "csi-hostpath-node-x1",
                    "io.kubernetes.container.name": "csi-hostpath"}},
        {"id": "bbb", "metadata": {"name": "csi-hostpath"}, "state": "CONTAINER_RUNNING",
         "labels": {"io.kubernetes.pod.namespace": "csi-hostpath",
                    "io.kubernetes.pod.name": "csi-hostpath-controller-0",
                    "io.kubernetes.container.name": "csi-hostpath"}},
        {"id": "ccc", "metadata": {"name": "etcd"}, "state": "CONTAINER_EXITED",
         "labels": {"io.kubernetes.pod.namespace": "kube-system",
                    "io.kubernetes.pod.name": "etcd-kind-control-plane",
                    "io.kubernetes.container.name": "etcd"}},
        {"id": "ddd", "metadata": {"name": "etcd"}, "state": "CONTAINER_RUNNING",
         "labels": {"io.kubernetes.pod.namespace": "kube-system",
                    "io.kubernetes.pod.name": "etcd-kind-control-plane",
                    "io.kubernetes.container.name": "etcd"}},
    ]
}  # fmt: skip


def test_containers_pids_and_processes_are_read_from_crictl_and_pgrep() -> None:
    ps = json.dumps(CRICTL_PS)
    assert pick_containers(ps, "csi-hostpath", "csi-hostpath-node-x1", "csi-hostpath") == ["aaa"]
    assert pick_containers(ps, "csi-hostpath", "csi-hostpath-controller-0", "csi-hostpath") == [
        "bbb"
    ]
    assert pick_containers(ps, "kube-system", "etcd-", "etcd") == ["ddd"]  # not the exited one
    assert pid_of(json.dumps({"info": {"pid": 4242}})) == 4242
    assert parse_pids("123\n456\n") == [123, 456]


class FakeNodes:
    """docker exec, answered from a script: (node, first words) -> output, or an error raised."""

    def __init__(self, answers: dict[tuple[str, str], list[str | Exception]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, list[str]]] = []

    def exec(self, node: str, argv: list[str], timeout: float = 120) -> str:
        self.calls.append((node, list(argv)))
        queue = self.answers.get((node, " ".join(argv[:2])), [])
        if not queue:
            raise subprocess.CalledProcessError(1, argv)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_kill_is_kill_9_of_the_pid_in_its_node_and_back_means_a_new_container() -> None:
    ps = json.dumps(CRICTL_PS)
    moved = json.loads(ps)
    moved["containers"][3]["id"] = "eee"
    nodes = FakeNodes({
        ("cp", "crictl ps"): [ps, json.dumps(moved)],
        ("cp", "crictl inspect"): [json.dumps({"info": {"pid": 77}})],
        ("cp", "kill -9"): [""],
        ("w1", "pgrep -x"): ["301\n", "302\n"],
        ("w1", "kill -9"): [""],
        ("w1", "systemctl is-active"): ["active\n"],
    })  # fmt: skip
    killer = Killer(nodes, "csi-hostpath", lambda role, node: f"csi-hostpath-{role}")  # type: ignore[arg-type]
    kill = killer.kill(Target("etcd", "cp"))
    assert (kill.pid, kill.container) == (77, "ddd")
    assert ("cp", ["kill", "-9", "77"]) in nodes.calls
    assert killer.came_back(kill)  # now ddd is eee
    unit = killer.kill(Target("kubelet", "w1"))
    assert unit.pid == 301 and ("w1", ["kill", "-9", "301"]) in nodes.calls
    assert killer.came_back(unit)  # pid 302, active


class FakeSubject:
    def __init__(self, trigger_after: int, done_after: int) -> None:
        self.polls = 0
        self.trigger_after, self.done_after = trigger_after, done_after

    def triggered(self, name: str) -> bool:
        self.polls += 1
        return self.polls >= self.trigger_after

    def done(self, phase: str) -> bool:
        return self.polls >= self.done_after


def test_a_kill_lands_in_its_phase_or_late() -> None:
    cell = matrix.select("kubelet/stage")[0]
    assert await_trigger(FakeSubject(3, 10), cell, 30) == "in-phase"  # type: ignore[arg-type]
    assert await_trigger(FakeSubject(3, 2), cell, 30) == "late"  # type: ignore[arg-type]
    assert await_trigger(FakeSubject(99, 2), cell, 30) == "late"  # type: ignore[arg-type]


def test_each_cell_has_a_namespace_of_its_own() -> None:
    names = [namespace_of(c.id) for c in matrix.cells()]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 63 and n.replace("-", "").isalnum() and n.islower() for n in names)


def test_the_reliability_page_lists_every_pair_that_is_no_cell_with_its_reason() -> None:
    text = (REPO / "docs" / "reliability.md").read_text()
    section = text.split("### Cells that can't happen", 1)[1].split("\n### ", 1)[0]
    listed = set()
    for line in section.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 3 and cols[0] in {c.name for c in matrix.COMPONENTS}:
            listed |= {(cols[0], p.strip(), cols[2]) for p in cols[1].split(",")}
    assert listed == set(matrix.off_path())
    assert f"{len(matrix.cells())} of the 130 pairs are cells" in text
    assert f"the other {len(matrix.off_path())}" in text
    assert f"the {len(schedule.slots())} targets" in text


def test_a_run_that_cannot_reach_its_cluster_lists_its_rows_as_not_reached_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    argv = ["--kubeconfig", str(tmp_path / "none"), "--cells", "etcd/create",
            "--partition", "reboot", "--results", str(out)]  # fmt: skip
    assert faults_main.main(argv) == 1
    rows = json.loads(out.read_text())["results"]
    assert [(r["id"], r["outcome"]) for r in rows] == [
        ("etcd/create", "skipped"), ("partition/reboot", "skipped")]  # fmt: skip
    assert rows[0]["detail"].startswith("not reached: ")
    assert "0 run, 0 passed, 0 failed, 2 skipped" in capsys.readouterr().out
