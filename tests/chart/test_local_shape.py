"""The chart's local shape: each node's pod controls its own pool; no central controller.

The many-machines shape, pool.scope local: each node's DaemonSet pod is the controller
of its own pool beside a node-local external-provisioner; no central controller, no attach.

Upstream: external-provisioner v6.4.1 README ("Deployment on each node", "Capacity support"),
cmd/csi-provisioner/csi-provisioner.go, pkg/owner/owner.go; csi-snapshotter v8.7.0
cmd/csi-snapshotter/main.go."""

from __future__ import annotations

from typing import Any

import pytest

from csi_hostpath.cli import build_parser
from tests.chart import chart_tool
from tests.chart.chart_objects import all_containers, container, flag, node_pod
from tests.chart.chart_tool import NAMESPACE, Rendered
from tests.chart.conftest import LOCAL_CASES, Case, rendered_case

Obj = dict[str, Any]


@pytest.fixture(params=LOCAL_CASES, ids=[c.name for c in LOCAL_CASES])
def local(request: pytest.FixtureRequest) -> Rendered:
    return rendered_case(request.param)


def env_of(c: Obj) -> dict[str, str]:
    return {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c.get("env", [])}


def test_every_object_is_valid_kubernetes(local: Rendered) -> None:
    for obj in local.objects:
        chart_tool.validate(obj)
    kinds = {o["kind"] for o in local.objects}
    assert "StatefulSet" not in kinds and "Service" not in kinds
    for name, c in all_containers(local):
        assert ":" in c["image"] and not c["image"].endswith(":latest"), name
        assert c["resources"]["requests"], name


@pytest.mark.parametrize("values", [{"pool": {"scope": "local"}}, {}])
def test_driver_flags_are_the_clis_own(values: Obj) -> None:
    """The driver's args parse with csi_hostpath.cli's real parser, in both shapes."""
    r = chart_tool.render(values)
    for workload in ("DaemonSet", "StatefulSet"):
        for w in r.of_kind(workload):
            args = container(w["spec"]["template"]["spec"], "csi-hostpath")["args"]
            parsed = build_parser().parse_args([a.replace("$(NODE_ID)", "n1") for a in args])
            assert parsed.pool_scope == r.values["pool"]["scope"]
            assert parsed.self_publish is (r.values["pool"]["scope"] == "local")


def test_node_pod_is_the_controller_of_its_pool(local: Rendered) -> None:
    driver = container(node_pod(local), "csi-hostpath")
    assert flag(driver, "mode") == "all"
    # No attach in this shape: NodeStage takes the node's own hold
    # (tests/unit/test_self_publish.py).
    assert "--self-publish" in driver["args"]
    assert flag(driver, "pool-scope") == "local"
    assert flag(driver, "state-dir") == local.values["node"]["stateHostPath"]


def test_node_local_provisioner(local: Rendered) -> None:
    prov = container(node_pod(local), "csi-provisioner")
    for wanted in (
        "--node-deployment=true",
        "--node-deployment-immediate-binding=true",
        "--enable-capacity",
        "--capacity-ownerref-level=1",
        "--strict-topology=true",
        "--immediate-topology=false",
        "--feature-gates=Topology=true",
    ):
        assert wanted in prov["args"]
    assert "--leader-election" not in prov["args"]
    # NODE_NAME picks this node's claims; NAMESPACE and POD_NAME place and own the capacities.
    assert env_of(prov) == {
        "NODE_NAME": "spec.nodeName",
        "NAMESPACE": "metadata.namespace",
        "POD_NAME": "metadata.name",
    }
    names = {c["name"] for c in node_pod(local)["containers"]}
    assert not {"csi-attacher", "csi-resizer"} & names


def test_node_local_snapshotter() -> None:
    r = rendered_case(LOCAL_CASES[1])
    snap = container(node_pod(r), "csi-snapshotter")
    assert "--node-deployment=true" in snap["args"]
    # Group snapshots stay off on the nodes, though v8.7.0 turns them on by default.
    assert "--feature-gates=CSIVolumeGroupSnapshot=false" in snap["args"]
    assert "--leader-election" not in snap["args"]
    assert env_of(snap) == {"NODE_NAME": "spec.nodeName"}


def test_csidriver(local: Rendered) -> None:
    spec = local.one("CSIDriver")["spec"]
    assert spec["attachRequired"] is False
    assert spec["storageCapacity"] is True
    shared = rendered_case(Case("defaults", {})).one("CSIDriver")["spec"]
    assert shared["attachRequired"] is True and shared["storageCapacity"] is False


def test_storage_classes_wait_for_first_consumer(local: Rendered) -> None:
    classes = local.of_kind("StorageClass")
    assert [c["volumeBindingMode"] for c in classes] == ["WaitForFirstConsumer"]
    assert classes[0]["allowVolumeExpansion"] is False


def _rules(r: Rendered, kind: str, suffix: str) -> list[Obj]:
    found = [o for o in r.of_kind(kind) if o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {len(found)}"
    rules: list[Obj] = found[0]["rules"]
    return rules


def test_rbac(local: Rendered) -> None:
    account = node_pod(local)["serviceAccountName"]
    assert "automountServiceAccountToken" not in node_pod(local)
    accounts = local.of_kind("ServiceAccount")
    assert [a["metadata"]["name"] for a in accounts] == [account]
    assert "automountServiceAccountToken" not in accounts[0]
    bindings = local.drivers("ClusterRoleBinding") + local.drivers("RoleBinding")
    for b in bindings:
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]
    roles = {r["metadata"]["name"].rsplit("-", 1)[-1] for r in local.drivers("ClusterRole")}
    assert roles <= {"provisioner", "snapshotter"} and "provisioner" in roles
    capacity = _rules(local, "Role", "-capacity")
    assert capacity == [
        {
            "apiGroups": ["storage.k8s.io"],
            "resources": ["csistoragecapacities"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        # The owner lookup at level 1 reads the pod only (pkg/owner/owner.go, lookupRecursive).
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]
    assert {r["metadata"]["name"] for r in local.drivers("Role")} == {
        f"{account.removesuffix('-node')}-capacity"
    }
    for kind in ("ClusterRole", "Role"):
        for role in local.of_kind(kind):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "secrets" not in rule["resources"]


@pytest.mark.parametrize("scope", ["Local", "node", ""])
def test_schema_refuses_other_scopes(scope: str) -> None:
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmValuesError, match="/pool/scope"):
        chart_tool.render({"pool": {"scope": scope}})


def test_notes_name_the_shape(local: Rendered) -> None:
    assert "docs/kind-many-machines.md" in local.notes
    assert "csistoragecapacities" in local.notes
    assert "controller-0" not in local.notes


def test_docs_say_which_shape_and_why() -> None:
    from tests.chart.chart_tool import ROOT

    page = (ROOT / "docs" / "kind-many-machines.md").read_text()
    assert "kind-many-machines.md" in (ROOT / "docs" / "kind.md").read_text()
    for needed in ("gives up", "attachRequired: false", "storageCapacity: true", "expansion"):
        assert needed in page, needed
    design = (ROOT / "docs" / "design.md").read_text()
    assert "## The local shape" in design and "attachRequired is false" in design


@pytest.mark.parametrize("scope", ["local", "shared"])
def test_overcommit_and_lost_after_reach_the_driver(scope: str) -> None:
    """The thin-capacity ratio and the node-loss threshold are chart values, passed to
    the driver in both shapes and parsed by its own CLI."""
    r = chart_tool.render(
        {"pool": {"scope": scope}, "driver": {"overcommitRatio": 1.5, "nodeLostAfter": 120}}
    )
    for workload in ("DaemonSet", "StatefulSet"):
        for w in r.of_kind(workload):
            args = container(w["spec"]["template"]["spec"], "csi-hostpath")["args"]
            parsed = build_parser().parse_args([a.replace("$(NODE_ID)", "n1") for a in args])
            assert parsed.overcommit_ratio == 1.5 and parsed.node_lost_after == 120
    default_args = container(
        node_pod(chart_tool.render({"pool": {"scope": scope}})), "csi-hostpath"
    )
    defaults = build_parser().parse_args(
        [a.replace("$(NODE_ID)", "n1") for a in default_args["args"]]
    )
    assert defaults.overcommit_ratio == 1.0 and defaults.node_lost_after == 900


@pytest.mark.parametrize("value", [0, -1])
def test_the_schema_refuses_a_ratio_that_is_not_above_zero(value: float) -> None:
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmValuesError) as e:
        chart_tool.render({"driver": {"overcommitRatio": value}})
    assert "/driver/overcommitRatio" in str(e.value)
