"""The chart against the pinned sidecar releases' own deploy manifests and source.

Each test names the upstream file it follows; each failed on the chart before the fix."""

from __future__ import annotations

from typing import Any

from tests.chart.chart_objects import container, controller_pod, flag, node_pod
from tests.chart.chart_tool import SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case

Obj = dict[str, Any]


def rules_of(r: Rendered, suffix: str) -> list[Obj]:
    roles = [o for o in r.of_kind("ClusterRole") if o["metadata"]["name"].endswith(suffix)]
    assert len(roles) == 1, f"expected one ClusterRole *{suffix}"
    rules: list[Obj] = roles[0]["rules"]
    return rules


def verbs_on(rules: list[Obj], group: str, resource: str) -> set[str]:
    return {
        v
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"]
        for v in rule["verbs"]
    }


def test_registrar_liveness_is_an_http_healthz(rendered: Rendered) -> None:
    """node-driver-registrar v2.17.0: --mode=kubelet-registration-probe exits 0 whatever happens
    (cmd/csi-node-driver-registrar/main.go), so an exec probe in that mode never fails. /healthz on
    --http-endpoint checks the registration socket (node_register.go)."""
    registrar = container(node_pod(rendered), "node-driver-registrar")
    port = rendered.values["sidecars"]["nodeDriverRegistrar"]["httpPort"]
    assert flag(registrar, "http-endpoint") == f":{port}"
    assert not any(a.startswith(("--mode=", "--health-port=")) for a in registrar["args"])
    probe = registrar["livenessProbe"]
    assert "exec" not in probe
    assert probe["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in registrar["ports"]}
    assert ports[probe["httpGet"]["port"]] == port


def test_livenessprobe_uses_http_endpoint(rendered: Rendered) -> None:
    """livenessprobe v2.19.0 marks --health-port deprecated (cmd/livenessprobe/main.go)."""
    for spec, key in ((controller_pod(rendered), "controller"), (node_pod(rendered), "node")):
        probe = container(spec, "liveness-probe")
        assert flag(probe, "http-endpoint") == f":{rendered.values[key]['healthPort']}"
        assert not any(a.startswith("--health-port") for a in probe["args"])


def test_provisioner_protects_the_snapshot_it_restores() -> None:
    """external-provisioner v6.2+ puts a finalizer on a restore's source VolumeSnapshot and sweeps
    orphaned ones: watch and update (deploy/kubernetes/rbac.yaml of v6.4.1)."""
    r = rendered_case(Case("snapshot-api", {}, (SNAPSHOT_API,)))
    rules = rules_of(r, "-provisioner")
    group = "snapshot.storage.k8s.io"
    assert verbs_on(rules, group, "volumesnapshots") == {"get", "list", "watch", "update"}
    assert verbs_on(rules, group, "volumesnapshotcontents") == {"get", "list"}


def test_snapshotter_creates_no_contents() -> None:
    """The snapshot-controller creates VolumeSnapshotContents; the csi-snapshotter sidecar only
    updates them (deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml of v8.7.0)."""
    r = rendered_case(Case("snapshot-api", {}, (SNAPSHOT_API,)))
    rules = rules_of(r, "-snapshotter")
    group = "snapshot.storage.k8s.io"
    assert verbs_on(rules, group, "volumesnapshotcontents") == {
        "get",
        "list",
        "watch",
        "update",
        "patch",
    }
    assert verbs_on(rules, group, "volumesnapshotcontents/status") == {"update", "patch"}


CONTROLLER_SIDECARS = {
    "csi-provisioner": "provisioner",
    "csi-attacher": "attacher",
    "csi-resizer": "resizer",
    "csi-snapshotter": "snapshotter",
}


def test_sidecars_serve_http_endpoint(rendered: Rendered) -> None:
    """Each controller sidecar serves --http-endpoint (metrics, and /healthz/leader-election, the
    liveness check upstream recommends with leader election: external-provisioner README, "HTTP
    endpoint"; external-attacher deploy/kubernetes/deployment.yaml)."""
    election = rendered.values["controller"]["leaderElection"]
    seen = set()
    for c in controller_pod(rendered)["containers"]:
        key = CONTROLLER_SIDECARS.get(c["name"])
        if key is None:
            continue
        seen.add(c["name"])
        port = rendered.values["sidecars"][key]["httpPort"]
        assert flag(c, "http-endpoint") == f":{port}"
        assert not any(a.startswith("--metrics-address") for a in c["args"]), c["name"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports == {key: port}
        if election:
            probe = c["livenessProbe"]["httpGet"]
            assert probe == {"path": "/healthz/leader-election", "port": key}
        else:
            assert "livenessProbe" not in c
    assert {"csi-provisioner", "csi-attacher"} <= seen


def test_statefulset_service_exists(rendered: Rendered) -> None:
    """spec.serviceName must name a Service (the governing Service of a StatefulSet)."""
    sts = rendered.one("StatefulSet")
    services = {s["metadata"]["name"]: s for s in rendered.of_kind("Service")}
    svc = services[sts["spec"]["serviceName"]]
    assert svc["spec"]["clusterIP"] == "None"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    pod = controller_pod(rendered)
    named = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
    targets = {p["targetPort"] for p in svc["spec"]["ports"]}
    assert targets <= named
    sidecars = {
        CONTROLLER_SIDECARS[c["name"]]
        for c in pod["containers"]
        if c["name"] in CONTROLLER_SIDECARS
    }
    assert sidecars <= targets
    assert ("metrics" in targets) is rendered.values["metrics"]["enabled"]


def test_default_priority_tolerations_and_os() -> None:
    r = rendered_case(Case("defaults", {}))
    node, ctrl = node_pod(r), controller_pod(r)
    assert node["priorityClassName"] == "system-node-critical"
    assert ctrl["priorityClassName"] == "system-cluster-critical"
    assert node["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert ctrl["nodeSelector"] == {"kubernetes.io/os": "linux"}
    # The node plugin goes wherever a pod with a volume may go; the controller may use the
    # control plane and nodes kept for critical add-ons.
    assert node["tolerations"] == [{"operator": "Exists"}]
    keys = {t.get("key") for t in ctrl["tolerations"]}
    assert keys == {"node-role.kubernetes.io/control-plane", "CriticalAddonsOnly"}


def test_priority_can_be_turned_off() -> None:
    r = rendered_case(
        Case(
            "no-priority",
            {"node": {"priorityClassName": ""}, "controller": {"priorityClassName": ""}},
        )
    )
    assert "priorityClassName" not in node_pod(r)
    assert "priorityClassName" not in controller_pod(r)


API_WRITERS = ("csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter")


def test_the_sidecars_api_limits_leave_room_for_a_burst_of_claims() -> None:
    """csi-lib-utils v0.24.0 (standardflags/flags.go), which each of these sidecars registers,
    limits its API client to --kube-api-qps 5 after a burst of --kube-api-burst 10. At that rate 20
    claims at once waited up to 3 s a request in the provisioner and 3 s an attach in the attacher;
    the chart raises both, for every one of them, the node-local provisioner too."""
    r = rendered_case(Case("snapshot-api", {}, (SNAPSHOT_API,)))
    local = rendered_case(Case("local-snapshots", {"pool": {"scope": "local"}}, (SNAPSHOT_API,)))
    seen = []
    for spec in (controller_pod(r), node_pod(local)):
        for c in spec["containers"]:
            if c["name"] in API_WRITERS:
                seen.append(c["name"])
                assert flag(c, "kube-api-qps") == "50", c["name"]
                assert flag(c, "kube-api-burst") == "100", c["name"]
    assert sorted(set(seen)) == sorted(API_WRITERS)
    tuned = rendered_case(Case("api-limits", {"sidecars": {"kubeAPIQPS": 20, "kubeAPIBurst": 40}}))
    attacher = container(controller_pod(tuned), "csi-attacher")
    assert (flag(attacher, "kube-api-qps"), flag(attacher, "kube-api-burst")) == ("20", "40")
