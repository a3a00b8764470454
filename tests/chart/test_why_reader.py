"""What the chart gives `kubectl csi-hostpath why`: the ledger view and exactly its RBAC.

What the chart gives `kubectl csi-hostpath why`: the driver's read-only ledger view (the flag,
the Service, the CSIDriver's annotation the plugin follows), and RBAC that grants exactly the
plugin's reads. "Exactly" is checked against the plugin itself: it runs on each case of
tests/unit/why_cases.py against a small API server, and every request it makes, turned into the
RBAC attributes the API server would check, must be granted, and every grant must be used."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath.why.command import run
from csi_hostpath.why.reads import LEDGER_ANNOTATION, ledger_route
from tests.chart import chart_tool
from tests.chart.chart_objects import container, controller_pod, node_pod
from tests.chart.chart_tool import NAMESPACE, WHY_READER, Rendered
from tests.unit.fake_apiserver import FakeCluster, serving
from tests.unit.why_cases import CASES
from tests.unit.why_shapes import LEDGER

Grant = tuple[str, str, str]  # apiGroup, resource, verb
Obj = dict[str, Any]


def _readers(r: Rendered, kind: str) -> list[Obj]:
    return [
        o
        for o in r.of_kind(kind)
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == WHY_READER
    ]


def _grants(role: Obj) -> set[Grant]:
    return {
        (g, res, verb)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.fixture(scope="module")
def shared() -> Rendered:
    return chart_tool.render({})


@pytest.fixture(scope="module")
def local() -> Rendered:
    return chart_tool.render({"pool": {"scope": "local"}})


def _attributes(path: str) -> tuple[Grant, str]:
    """The RBAC attributes of a GET, as the API server's request info makes them: (group,
    resource, verb) and the name a resourceNames rule matches ('' for a list)."""
    proxy = re.match(r"^/api/v1/namespaces/[^/]+/(services|pods)/([^/]+)/proxy/", path)
    if proxy:
        return ("", f"{proxy.group(1)}/proxy", "get"), proxy.group(2)
    parts = [p for p in path.split("/") if p]
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces":
        rest = rest[2:]
    return (group, rest[0], "get" if len(rest) > 1 else "list"), rest[1] if len(rest) > 1 else ""


def test_the_roles_grant_exactly_what_the_plugin_reads(
    shared: Rendered, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used: set[Grant] = set()
    proxied: set[str] = set()
    for case in CASES:
        cluster = FakeCluster(case.objects, case.ledger)
        (tmp_path / case.name).mkdir()
        with serving(cluster, tmp_path / case.name) as kubeconfig:
            assert run(["why", case.ask, "--kubeconfig", str(kubeconfig)]) == 0
        capsys.readouterr()
        for method, path, _ in cluster.requests:
            assert method == "GET", path
            grant, name = _attributes(path)
            if grant[1].endswith("/proxy"):
                proxied.add(name)
            else:
                used.add(grant)
    [cluster_role] = _readers(shared, "ClusterRole")
    assert _grants(cluster_role) == used
    assert {verb for _, _, verb in used} <= {"get", "list"}
    [role] = _readers(shared, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["services/proxy"],
            "resourceNames": [f"{LEDGER['service']}:metrics"],
            "verbs": ["get"],
        }
    ]
    assert proxied == {f"{LEDGER['service']}:metrics"}  # the one name the Role allows


def test_the_annotation_names_the_service_in_front_of_the_controllers_view(
    shared: Rendered,
) -> None:
    driver = shared.one("CSIDriver")
    route = ledger_route(driver)
    assert route == LEDGER  # what the plugin's tests assume is what the chart says
    [service] = _readers(shared, "Service")
    assert service["metadata"]["name"] == route["service"]
    assert service["metadata"]["namespace"] == route["namespace"] == NAMESPACE
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": shared.values["metrics"]["port"], "targetPort": "metrics"}
    ]
    pod = controller_pod(shared)
    labels = shared.one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    driver_c = container(pod, "csi-hostpath")
    assert "metrics" in {p["name"] for p in driver_c["ports"]}
    assert "--ledger-view" in driver_c["args"]
    assert route["controllerPod"] == shared.one("StatefulSet")["metadata"]["name"] + "-0"
    # The node plugins of the shared shape hold no ledger.
    assert "--ledger-view" not in container(node_pod(shared), "csi-hostpath")["args"]


def test_the_local_shape_reads_each_nodes_own_ledger(local: Rendered) -> None:
    route = ledger_route(local.one("CSIDriver"))
    assert route is not None and "service" not in route
    assert route["port"] == str(local.values["metrics"]["port"])
    labels = local.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    wanted = dict(term.split("=") for term in route["pods"].split(","))
    assert wanted.items() <= labels.items()
    assert "--ledger-view" in container(node_pod(local), "csi-hostpath")["args"]
    [role] = _readers(local, "Role")
    assert _grants(role) == {("", "pods/proxy", "get")}
    assert not _readers(local, "Service")


@pytest.mark.parametrize(
    "values",
    [{"why": {"enabled": False}}, {"metrics": {"enabled": False}}],
    ids=["off", "no-metrics"],
)
def test_without_the_view_nothing_of_it_is_rendered(values: Obj) -> None:
    r = chart_tool.render(values)
    assert LEDGER_ANNOTATION not in r.one("CSIDriver")["metadata"].get("annotations", {})
    assert "--ledger-view" not in container(controller_pod(r), "csi-hostpath")["args"]
    assert not _readers(r, "Service") and not _readers(r, "Role")
    # The Kubernetes reads stay grantable: the plugin answers without the driver's view.
    assert len(_readers(r, "ClusterRole")) == 1


def test_the_roles_are_bound_to_whom_readers_names_only() -> None:
    assert not _readers(chart_tool.render({}), "ClusterRoleBinding")
    oncall = {"kind": "Group", "name": "storage-oncall", "apiGroup": "rbac.authorization.k8s.io"}
    bot = {"kind": "ServiceAccount", "name": "why-bot", "namespace": "ops"}
    r = chart_tool.render({"why": {"readers": [oncall, bot]}})
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        [binding] = _readers(r, kind)
        chart_tool.validate(binding)
        assert binding["subjects"] == [oncall, bot]
        assert binding["roleRef"]["kind"] == role_kind
        assert binding["roleRef"]["name"] == _readers(r, role_kind)[0]["metadata"]["name"]
    none = chart_tool.render({"why": {"readerRoles": False, "readers": [oncall]}})
    for kind in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"):
        assert not _readers(none, kind)


def test_the_schema_refuses_a_subject_without_a_kind() -> None:
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmValuesError, match="/why/readers"):
        chart_tool.render({"why": {"readers": [{"name": "x"}]}})


def test_the_notes_name_the_plugin(shared: Rendered) -> None:
    assert "kubectl csi-hostpath why" in shared.notes
    assert json.loads(shared.one("CSIDriver")["metadata"]["annotations"][LEDGER_ANNOTATION])
