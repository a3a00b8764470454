"""Every object the chart renders, under every value set, is valid Kubernetes 1.35 and safe.

Named and namespaced, images pinned, resources requested, a security context on every container,
least-privilege RBAC with one role per sidecar, leader election as asked; the storage and snapshot
classes follow the values and the snapshot API."""

from __future__ import annotations

import re

from tests.chart import chart_tool
from tests.chart.chart_objects import all_containers, container, controller_pod, flag, node_pod
from tests.chart.chart_tool import KUBE_VERSION, NAMESPACE, SNAPSHOT_API, Rendered
from tests.chart.conftest import Case


def test_every_object_is_valid_kubernetes_1_35(rendered: Rendered) -> None:
    assert rendered.objects, "the chart rendered nothing"
    versions = set()
    for obj in rendered.objects:
        versions.add(chart_tool.validate(obj))
    builtin = {v for v in versions if not v.startswith("crd:")}
    assert builtin == {KUBE_VERSION.rsplit(".", 1)[0]}, (
        f"validated against {builtin}, not Kubernetes {KUBE_VERSION}"
    )


def test_objects_are_named_and_namespaced(rendered: Rendered) -> None:
    cluster_scoped = {
        "CSIDriver",
        "StorageClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "VolumeSnapshotClass",
        "SnapshotMetadataService",
    }
    seen = set()
    for obj in rendered.objects:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{key} is rendered twice"
        seen.add(key)
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], key
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, key
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == chart_tool.RELEASE, key


IMAGE_RE = re.compile(
    r"^(?P<repo>[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def test_every_image_is_pinned(rendered: Rendered) -> None:
    containers = list(all_containers(rendered))
    assert containers
    for where, c in containers:
        m = IMAGE_RE.match(c["image"])
        assert m, f"{where}: malformed image {c['image']!r}"
        assert m.group("tag") or m.group("digest"), f"{where}: untagged image {c['image']}"
        assert m.group("tag") != "latest", f"{where}: {c['image']} is not pinned"
        assert c.get("imagePullPolicy") in {"Always", "IfNotPresent", "Never"}, where


def test_every_container_requests_resources(rendered: Rendered) -> None:
    for where, c in all_containers(rendered):
        requests = c.get("resources", {}).get("requests", {})
        assert requests.get("cpu") and requests.get("memory"), f"{where}: requests {requests}"


def test_every_container_has_a_security_context(rendered: Rendered) -> None:
    for where, c in all_containers(rendered):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            assert where.startswith("DaemonSet/") and c["name"] == "csi-hostpath", where
            continue
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("readOnlyRootFilesystem") is True, where


def test_storage_classes(rendered: Rendered) -> None:
    sc_values = rendered.values["storageClasses"]
    by_mode = {sc["volumeBindingMode"]: sc for sc in rendered.of_kind("StorageClass")}
    assert set(by_mode) == {"Immediate", "WaitForFirstConsumer"}
    assert by_mode["Immediate"]["metadata"]["name"] == sc_values["immediate"]["name"]
    wffc = sc_values["waitForFirstConsumer"]
    assert by_mode["WaitForFirstConsumer"]["metadata"]["name"] == wffc["name"]
    for key, sc in by_mode.items():
        assert sc["parameters"]["csi.storage.k8s.io/fstype"] == sc_values["fsType"]
        assert sc["reclaimPolicy"] == sc_values["reclaimPolicy"]
        assert sc["allowVolumeExpansion"] is sc_values["allowVolumeExpansion"]
        assert sc.get("mountOptions", []) == sc_values["mountOptions"]
        wanted = sc_values["immediate" if key == "Immediate" else "waitForFirstConsumer"]
        annotations = sc["metadata"].get("annotations", {})
        is_default = annotations.get("storageclass.kubernetes.io/is-default-class") == "true"
        assert is_default is wanted["isDefault"]
    provisioner = container(controller_pod(rendered), "csi-provisioner")
    assert flag(provisioner, "default-fstype") == sc_values["fsType"]


def test_snapshot_support_follows_the_api(rendered: Rendered, case: Case) -> None:
    served = SNAPSHOT_API in case.api_versions and rendered.values["snapshots"]["enabled"]
    names = {c["name"] for c in controller_pod(rendered)["containers"]}
    roles = {r["metadata"]["name"] for r in rendered.of_kind("ClusterRole")}
    classes = rendered.of_kind("VolumeSnapshotClass")
    assert ("csi-snapshotter" in names) is served
    assert any(r.endswith("-snapshotter") for r in roles) is served
    assert len(classes) == (1 if served else 0)
    if served:
        vsc_values = rendered.values["snapshots"]["volumeSnapshotClass"]
        assert classes[0]["metadata"]["name"] == vsc_values["name"]
        assert classes[0]["deletionPolicy"] == vsc_values["deletionPolicy"]


RBAC_KINDS = ("ClusterRole", "Role")


def test_rbac_is_least_privilege(rendered: Rendered) -> None:
    sa_controller = f"{rendered.one('StatefulSet')['metadata']['name']}"
    for kind in RBAC_KINDS:
        for role in rendered.of_kind(kind):
            for rule in role["rules"]:
                for field in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {rule}"
                assert "secrets" not in rule["resources"], role["metadata"]["name"]
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    bindings = rendered.drivers("ClusterRoleBinding") + rendered.drivers("RoleBinding")
    bound = {b["roleRef"]["name"] for b in bindings}
    for kind in RBAC_KINDS:
        for role in rendered.drivers(kind):
            assert role["metadata"]["name"] in bound, f"{role['metadata']['name']} is unbound"
    for b in bindings:
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": sa_controller, "namespace": NAMESPACE}
        ], b["metadata"]["name"]
    assert controller_pod(rendered)["serviceAccountName"] == sa_controller
    # The node plugin's account is bound to nothing and gets no token.
    node = node_pod(rendered)
    assert node["serviceAccountName"] not in {s["name"] for b in bindings for s in b["subjects"]}
    assert node["automountServiceAccountToken"] is False


def test_each_sidecar_has_its_own_cluster_role(rendered: Rendered) -> None:
    fullname = rendered.one("StatefulSet")["metadata"]["name"].removesuffix("-controller")
    roles = {
        r["metadata"]["name"].removeprefix(f"{fullname}-") for r in rendered.drivers("ClusterRole")
    }
    sidecars = {c["name"] for c in controller_pod(rendered)["containers"]}
    expected = {n.removeprefix("csi-") for n in sidecars if n.startswith("csi-")} - {"hostpath"}
    assert roles == expected


def test_leader_election(rendered: Rendered) -> None:
    enabled = rendered.values["controller"]["leaderElection"]
    assert (len(rendered.drivers("Role")) == 1) is enabled
    for c in controller_pod(rendered)["containers"]:
        if c["name"] in {"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"}:
            assert ("--leader-election" in c["args"]) is enabled, c["name"]
    if enabled:
        rules = rendered.drivers("Role")[0]["rules"]
        assert rules == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "watch", "create", "update", "delete"],
            }
        ]
