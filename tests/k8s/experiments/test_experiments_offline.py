"""The experiments' runner, offline: table, arguments, registry, manifests, waits, exit code.

The experiments' runner checked offline (no root, no cluster): its table, its arguments, its
registry of experiments, the manifests it applies (valid Kubernetes 1.35, strictly), its waits,
and that a run which can't reach its cluster prints every experiment as not reached and exits 1."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chart.chart_tool import validate
from tests.k8s.experiments import context, runner
from tests.k8s.experiments.kube import Failed, Obj, holds, until
from tests.k8s.experiments.nodes import REPO
from tests.k8s.experiments.table import Result, all_passed, render


def test_table_rows_in_letter_order_with_seconds_and_first_line_of_detail() -> None:
    results = [
        Result("c", "third", "FAILED", 12.4, "timed out waiting for x\nmore"),
        Result("a", "first", "passed", 3.6),
        Result("b", "second", "skipped", 0.0, "not reached: boom"),
    ]
    lines = render(results).splitlines()
    assert lines[0].split() == ["exp", "experiment", "result", "seconds", "detail"]
    assert [line.split()[0] for line in lines[2:5]] == ["a", "b", "c"]
    assert lines[2].split()[1:4] == ["first", "passed", "4"]
    assert lines[4].endswith("timed out waiting for x")
    assert "more" not in render(results)
    # The seconds column is right-aligned: its last digit under the header's last letter.
    assert lines[0].index("seconds") + len("seconds") - 1 == lines[4].index("12") + 1
    assert lines[-1] == "1 passed, 1 failed, 1 skipped; 16 s"


def test_only_a_run_where_every_experiment_passed_passes() -> None:
    ok = Result("a", "t", "passed", 1.0)
    assert all_passed([ok])
    assert not all_passed([])
    assert not all_passed([ok, Result("b", "t", "skipped", 0.0)])
    assert not all_passed([ok, Result("b", "t", "FAILED", 0.0)])


def test_every_experiment_a_to_q_is_registered_once_in_its_shape() -> None:
    assert sorted(context.REGISTRY) == list("abcdefghijklmnopq")
    assert sorted(runner.ORDER) == list("abcdefghijklmnopq")
    assert context.REGISTRY["j"].shape == context.REGISTRY["o"].shape == "local"
    assert {e.shape for k, e in context.REGISTRY.items() if k not in "jo"} == {"shared"}
    with pytest.raises(ValueError, match="twice"):
        context.experiment("a", "again")(lambda ctx: None)


def test_the_order_keeps_the_disruptive_ones_last() -> None:
    order = runner.ORDER
    # The lost nodes (e, and q's) after everything that needs both nodes; the uninstall after
    # every shared experiment; the local shape, which needs its own install, at the end.
    for lost in "eq":
        assert order.index(lost) > max(order.index(x) for x in "abcdfghikmnp")
        assert order.index("l") > order.index(lost)
    assert order[-1] == "j" and order.index("o") > order.index("l")


def test_arguments_select_validate_and_imply() -> None:
    args = runner.parse_args(["--only", "jea"])
    assert runner.selected(args) == ["a", "e", "j"]
    args = runner.parse_args(["--skip", "ej"])
    assert runner.selected(args) == [x for x in runner.ORDER if x not in "ej"]
    args = runner.parse_args(["--kubeconfig", "/k"])
    assert args.kubeconfig == Path("/k")


@pytest.mark.parametrize(
    "argv",
    [["--only", "az"], ["--skip", "1"], ["--no-cluster"], ["--kind"], ["--cluster-name", "x"]],
)
def test_bad_arguments_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(SystemExit) as e:
        runner.parse_args(argv)
    assert e.value.code == 2


def test_the_kubeconfig_is_the_environments_else_kind_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/from/env")
    assert runner.parse_args([]).kubeconfig == Path("/from/env")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("KIND_CLUSTER", "other")
    want = REPO / ".run" / "kind" / "other" / "kubeconfig"
    assert runner.parse_args([]).kubeconfig == want


def test_a_run_that_cannot_reach_its_cluster_lists_all_as_not_reached_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    code = runner.main(["--kubeconfig", str(missing), "--only", "ab"])
    out = capsys.readouterr().out
    assert code == 1
    rows = [
        line.split()[:1] + [w for w in line.split() if w == "skipped"]
        for line in out.splitlines()[2:4]
    ]
    assert rows == [["a", "skipped"], ["b", "skipped"]]
    assert "not reached" in out


def test_list_prints_every_experiment_and_touches_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runner.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line[0] for line in lines] == list("abcdefghijklmnopq")


def test_the_manifests_it_applies_are_valid_kubernetes() -> None:
    objs = [
        context.pvc("p", "ns"),
        context.pvc("p", "ns", modes=("ReadWriteOncePod",), volumeAttributesClassName="x"),
        context.pvc("p", "ns", dataSource={"kind": "PersistentVolumeClaim", "name": "src"}),
        context.pod("w", "ns", "p", "sleep 1", node="n1"),
        context.pod(
            "w",
            "ns",
            "p",
            "sleep 1",
            volumes=[{"name": "s", "secret": {"secretName": "x"}}],
            mounts=[{"name": "s", "mountPath": "/s"}],
        ),
    ]
    for obj in objs:
        validate(obj)
    assert objs[3]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    assert "nodeSelector" not in objs[4]["spec"]


def test_until_returns_the_value_or_names_what_it_waited_for() -> None:
    seen: Iterator[bool | list[str] | str | None] = iter([None, False, [], "", "there"])
    assert until("x", lambda: next(seen), 5, interval=0.01) == "there"
    with pytest.raises(Failed, match="timed out after 0 s waiting for the thing"):
        until("the thing", lambda: None, 0.05, interval=0.01)


def test_until_reports_the_probes_last_error() -> None:
    def broken() -> None:
        raise Failed("claim not found")

    with pytest.raises(Failed, match=r"\(claim not found\)"):
        until("a claim", broken, 0.05, interval=0.01)


def test_holds_fails_as_soon_as_the_condition_stops() -> None:
    flips = iter([True, True, False])
    start = time.monotonic()
    with pytest.raises(Failed, match="expected it to hold"):
        holds("it", lambda: next(flips), 30, interval=0.01)
    assert time.monotonic() - start < 5
    holds("always", lambda: True, 0.05, interval=0.01)


def test_the_snapshot_controller_runs_the_pinned_release() -> None:
    from tests.k8s.experiments.chart import pinned

    assert pinned("CSI_SNAPSHOTTER_VERSION").startswith("v8.")
    with pytest.raises(Failed):
        pinned("NO_SUCH_VERSION")


def test_the_changed_block_experiments_manifests_are_valid_kubernetes() -> None:
    from tests.k8s.experiments import exp_cbt

    objs = [
        exp_cbt.block_pod("w", "ns", "vol"),
        exp_cbt.lister_pod("l", "ns", "backup", ["-s", "snap"], "svc.ns", "10.96.0.10"),
        *exp_cbt.client_rbac("ns", "backup"),
    ]
    for obj in objs:
        validate(obj)


def test_the_listers_json_is_read_as_4k_blocks() -> None:
    from tests.k8s.experiments import exp_cbt

    # Two stream records; protobuf's JSON leaves a zero byte_offset out.
    text = (
        '[{"block_metadata_type":2,"volume_capacity_bytes":67108864,'
        '"block_metadata":[{"size_bytes":16384},{"byte_offset":1048576,"size_bytes":4096}]}'
        ',{"block_metadata_type":2,"volume_capacity_bytes":67108864,'
        '"block_metadata":[{"byte_offset":67104768,"size_bytes":4096}]}]'
    )
    got, capacity = exp_cbt.listed_blocks(text)
    assert got == {0, 1, 2, 3, 256, 16383}
    assert capacity == 64 * 1024 * 1024
    assert exp_cbt.listed_blocks("[]") == (set(), 0)
    with pytest.raises(Failed, match="whole 4096-byte blocks"):
        exp_cbt.listed_blocks('[{"block_metadata":[{"byte_offset":512,"size_bytes":4096}]}]')
    assert exp_cbt.blocks(exp_cbt.SECOND) & exp_cbt.blocks(exp_cbt.FIRST) == {258}


def test_the_topology_experiments_manifests_are_valid_kubernetes() -> None:
    from tests.k8s.experiments import exp_limits, exp_topology

    for obj in exp_topology.nodes_rbac():
        validate(obj)
    assert exp_topology.DISTRIBUTED == "--enable-distributed-snapshotting"
    assert exp_limits.TAKEN > 0


def test_the_why_experiments_manifests_are_valid_kubernetes() -> None:
    from tests.k8s.experiments import why_plugin
    from tests.unit.why_shapes import volume

    original = volume("pvc-s", "vol-" + "1" * 32, "survivor", 12, 13)
    shadow_pv, shadow_claim = why_plugin.shadow(original, "e2e-q-shadow", "e2e-q", "shadow")
    doomed = context.pod("doomed", "e2e-q", "survivor", "sleep 1", node="n1")
    doomed["spec"]["tolerations"] = why_plugin.UNTIL_DEATH
    objs = [
        *why_plugin.reader_rbac("e2e-q", "csi-hostpath", "csi-hostpath"),
        why_plugin.block_pod("first", "e2e-q", "disk", "n1"),
        context.pvc("disk", "e2e-q", volumeMode="Block"),
        shadow_pv,
        shadow_claim,
        doomed,
    ]
    for obj in objs:
        validate(obj)
    # Kubernetes lets the second volume attach anywhere; deleting it keeps the data.
    assert shadow_pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert shadow_pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert shadow_pv["spec"]["csi"]["volumeHandle"] == original["spec"]["csi"]["volumeHandle"]
    assert shadow_claim["spec"]["volumeName"] == "e2e-q-shadow"


def test_the_why_reader_is_bound_to_the_charts_roles_only() -> None:
    from tests.chart import chart_tool
    from tests.k8s.experiments import why_plugin

    assert why_plugin.fullname("csi-hostpath") == "csi-hostpath"
    assert why_plugin.fullname("store") == "store-csi-hostpath"
    rendered = chart_tool.render({})
    roles = {
        (o["kind"], o["metadata"]["name"])
        for o in rendered.objects
        if o["kind"] in ("ClusterRole", "Role")
    }
    for b in why_plugin.reader_rbac("e2e-q", chart_tool.RELEASE, chart_tool.NAMESPACE)[1:]:
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in roles
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "why-reader", "namespace": "e2e-q"}
        ]


def test_the_readers_kubeconfig_is_read_as_kubectl_reads_it(tmp_path: Path) -> None:
    from csi_hostpath.why.kube_access import connect
    from tests.k8s.experiments import why_plugin

    admin = {"clusters": [{"name": "kind-x", "cluster": {"server": "https://127.0.0.1:6443"}}]}
    path = tmp_path / "reader"
    path.write_text(json.dumps(why_plugin.reader_kubeconfig(admin, "t0ken", "e2e-q")))
    access = connect(str(path), None)
    try:
        assert (access.namespace, access.where) == ("e2e-q", "why-reader")
        assert access.api.configuration.host == "https://127.0.0.1:6443"
        auth = access.api.configuration.auth_settings()["BearerToken"]
        assert (auth["key"], auth["value"]) == ("authorization", "Bearer t0ken")
    finally:
        access.api.close()


def test_the_why_experiments_expectations_are_the_plugins_own_words() -> None:
    """Each case's expected words, given the unit fixtures' names, are in what the plugin says
    of those fixtures: the experiment checks the real cluster for the same sentences."""
    from csi_hostpath.why.rules.blocker import diagnose
    from tests.k8s.experiments import why_plugin
    from tests.unit.test_why_rules import observed
    from tests.unit.why_cases import CASES

    names = {
        "multi-attach-ledger": {"a": "w1", "b": "w2"},
        "holder-gone": {"a": "w1", "pv": "pvc-s"},
        "fenced": {"a": "w1", "pv": "pvc-s"},
    }
    for case in CASES:
        reason = diagnose(observed(case)).blocker.reason
        for words in why_plugin.expected(case.name, "shop", **names.get(case.name, {})):
            assert words in reason, (case.name, words, reason)


def test_the_reason_line_is_read_from_the_plugins_text() -> None:
    from tests.k8s.experiments import why_plugin

    out = "pod ns/p on node n\nclaim c\nreason: nothing blocks: x\nnext: nothing to do\n"
    assert why_plugin.line_of(out, "reason") == "nothing blocks: x"
    assert why_plugin.line_of(out, "next") == "nothing to do"
    assert why_plugin.line_of(out, "risk") == ""
    assert why_plugin.plugin_path().split(os.pathsep)[0].endswith("bin")


def test_only_the_shadows_attachments_that_never_attached_are_cleaned_up() -> None:
    from tests.k8s.experiments.exp_why import SHADOW, refused_attachments

    def va(name: str, pv: str, attached: bool | None) -> Obj:
        status = {} if attached is None else {"status": {"attached": attached}}
        return {
            "metadata": {"name": name},
            "spec": {"source": {"persistentVolumeName": pv}},
            **status,
        }

    found = [
        va("to-b", SHADOW, False),
        va("no-status", SHADOW, None),
        va("to-a", SHADOW, True),
        va("original", "pvc-1", False),
    ]
    assert refused_attachments(found, SHADOW) == ["to-b", "no-status"]
