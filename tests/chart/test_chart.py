"""charts/csi-hostpath rendered under many value sets, checked against 1.35 and the kubelet."""

from __future__ import annotations

import copy
import json
import posixpath
import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chart import chart_tool
from tests.chart.chart_tool import CHART_DIR, KUBE_VERSION, NAMESPACE, ROOT, SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case

Obj = dict[str, Any]

# The sidecar releases the chart pins by default, the registrar and the liveness probe among
# them; implementation: csi-hostpath runs those two from the driver's image instead
# (tests/chart/test_helper_defaults.py).
UPSTREAM_HELPER_IMAGES = {
    "liveness-probe": "registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
    "node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0",
}
SIDECAR_IMAGES = {
    "csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
    "csi-attacher": "registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
    "csi-resizer": "registry.k8s.io/sig-storage/csi-resizer:v2.2.0",
    "csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.6.0",
    **UPSTREAM_HELPER_IMAGES,
}


# ----- reading rendered objects -----
def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def controller_pod(r: Rendered) -> Obj:
    return pod_spec(r.one("StatefulSet"))


def node_pod(r: Rendered) -> Obj:
    return pod_spec(r.one("DaemonSet"))


def all_containers(r: Rendered) -> Iterator[tuple[str, Obj]]:
    for kind in ("StatefulSet", "DaemonSet", "Deployment", "Job", "Pod"):
        for workload in r.of_kind(kind):
            spec = workload["spec"] if kind == "Pod" else pod_spec(workload)
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                yield f"{kind}/{workload['metadata']['name']}/{c['name']}", c


def container(spec: Obj, name: str) -> Obj:
    found = [c for c in spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}, found {len(found)}"
    return found[0]


def flag(c: Obj, name: str) -> str:
    """The value of `--name=value` in a container's args; the test fails if it is not there."""
    values = [a.split("=", 1)[1] for a in c.get("args", []) if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"{c['name']}: expected one --{name}=..., args are {c.get('args')}"
    return values[0]


def host_path_at(spec: Obj, c: Obj, mount_path: str) -> str:
    """The host directory a container sees at mount_path (the test fails if it is no hostPath)."""
    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == mount_path]
    assert len(mounts) == 1, f"{c['name']}: nothing (or several things) mounted at {mount_path}"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[0]["name"])
    assert "hostPath" in volume, f"{c['name']}: {mount_path} is not a hostPath volume: {volume}"
    path: str = volume["hostPath"]["path"]
    return path


def mount_holding(c: Obj, path: str) -> Obj:
    """The volume mount under which `path` lies inside a container (the deepest one)."""
    holding = [
        m
        for m in c.get("volumeMounts", [])
        if posixpath.commonpath([m["mountPath"], path]) == m["mountPath"]
    ]
    assert holding, f"{c['name']}: {path} is on no volume"
    return max(holding, key=lambda m: len(m["mountPath"]))


def mounted_dir_of(spec: Obj, c: Obj, path: str) -> tuple[str, str]:
    """(mountPath, hostPath) of the hostPath mount that holds `path` inside the container."""
    mount_path: str = mount_holding(c, path)["mountPath"]
    return mount_path, host_path_at(spec, c, mount_path)


def socket_path(endpoint: str) -> str:
    assert endpoint.startswith("unix:///"), f"not an absolute unix endpoint: {endpoint}"
    return endpoint[len("unix://") :]


# ----- every value set -----
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


def test_driver_name_is_the_same_everywhere(rendered: Rendered) -> None:
    name = rendered.values["driverName"]
    assert rendered.one("CSIDriver")["metadata"]["name"] == name
    classes = rendered.of_kind("StorageClass")
    assert classes and {sc["provisioner"] for sc in classes} == {name}
    for spec in (controller_pod(rendered), node_pod(rendered)):
        assert flag(container(spec, "csi-hostpath"), "driver-name") == name
    for vsc in rendered.of_kind("VolumeSnapshotClass"):
        assert vsc["driver"] == name
    registration = flag(
        container(node_pod(rendered), "node-driver-registrar"), "kubelet-registration-path"
    )
    assert f"/plugins/{name}/" in registration
    assert f"topology.{name}/node" in rendered.notes


def test_registration_path_is_the_node_plugin_socket(rendered: Rendered) -> None:
    """The kubelet dials the registration path on the host; it must be the very file the node
    plugin listens on, seen through the hostPath volume behind the plugin's socket directory."""
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    registrar = container(spec, "node-driver-registrar")
    sock = socket_path(flag(driver, "endpoint"))
    mount_path, host_dir = mounted_dir_of(spec, driver, sock)
    on_host = posixpath.join(host_dir, posixpath.relpath(sock, mount_path))
    assert flag(registrar, "kubelet-registration-path") == on_host
    # The registrar reaches the same socket through the same host directory.
    reg_sock = flag(registrar, "csi-address")
    reg_mount, reg_host_dir = mounted_dir_of(spec, registrar, reg_sock)
    assert posixpath.join(reg_host_dir, posixpath.relpath(reg_sock, reg_mount)) == on_host
    kubelet_dir = rendered.values["node"]["kubeletDir"].rstrip("/")
    assert host_path_at(spec, registrar, "/registration") == f"{kubelet_dir}/plugins_registry"


def test_sidecars_dial_the_driver_socket(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        sock = socket_path(flag(driver, "endpoint"))
        # The same volume (an emptyDir in the controller, a hostPath on the nodes) holds it.
        volume = mount_holding(driver, sock)["name"]
        for c in spec["containers"]:
            if c["name"] == "csi-hostpath":
                continue
            assert flag(c, "csi-address") == sock, c["name"]
            assert mount_holding(c, sock)["name"] == volume, c["name"]


def test_kubelet_dir_is_mounted_bidirectional(rendered: Rendered) -> None:
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    kubelet_dir = rendered.values["node"]["kubeletDir"].rstrip("/")
    mounts = [m for m in driver["volumeMounts"] if m["mountPath"] == kubelet_dir]
    assert len(mounts) == 1, f"the kubelet dir {kubelet_dir} is not mounted at the same path"
    assert mounts[0].get("mountPropagation") == "Bidirectional"
    assert host_path_at(spec, driver, kubelet_dir) == kubelet_dir
    # Only the privileged driver may propagate mounts back to the host.
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m.get("mountPropagation") == "Bidirectional":
                assert c["securityContext"].get("privileged") is True, c["name"]


def test_node_plugin_is_privileged_and_sees_dev(rendered: Rendered) -> None:
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    assert driver["securityContext"]["privileged"] is True
    assert host_path_at(spec, driver, "/dev") == "/dev"
    assert flag(driver, "mode") == "node"


def test_node_plugin_sees_the_hosts_cgroups(rendered: Rendered) -> None:
    # A VolumeAttributesClass's limits go into the cgroups of the volume's pods. Without the host's
    # /sys/fs/cgroup the plugin saw only its own container's cgroup (cgroup v1) and put the limits
    # there, throttling nothing: seen in the real cluster (make cluster-e2e, experiment h).
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    assert host_path_at(spec, driver, "/sys/fs/cgroup") == "/sys/fs/cgroup"


def test_node_id_is_the_kubernetes_node_name(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        assert flag(driver, "node-id") == "$(NODE_ID)"
        env = {e["name"]: e for e in driver["env"]}
        assert env["NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_controller_and_nodes_share_the_pool(rendered: Rendered) -> None:
    pool = rendered.values["pool"]
    for spec, mode in ((controller_pod(rendered), "controller"), (node_pod(rendered), "node")):
        driver = container(spec, "csi-hostpath")
        assert flag(driver, "mode") == mode
        assert flag(driver, "pool-scope") == pool["scope"]
        assert flag(driver, "pool-dir") == pool["hostPath"]
        assert host_path_at(spec, driver, pool["hostPath"]) == pool["hostPath"]
    # Each role keeps its own state on a hostPath (the ledger survives a pod restart), and never
    # the same directory: the driver locks its state directory.
    ctrl = container(controller_pod(rendered), "csi-hostpath")
    node = container(node_pod(rendered), "csi-hostpath")
    ctrl_state = flag(ctrl, "state-dir")
    node_state = flag(node, "state-dir")
    assert host_path_at(controller_pod(rendered), ctrl, ctrl_state) == ctrl_state
    assert host_path_at(node_pod(rendered), node, node_state) == node_state
    assert ctrl_state != node_state
    assert pool["hostPath"] not in (ctrl_state, node_state)


def test_numbers_reach_the_driver_as_plain_integers(rendered: Rendered) -> None:
    """Helm holds numbers as float64; a large size must not render as 1.073741824e+10."""
    driver = container(controller_pod(rendered), "csi-hostpath")
    assert flag(driver, "max-volume-size") == str(rendered.values["driver"]["maxVolumeSize"])
    assert flag(driver, "max-volumes-per-node") == str(
        rendered.values["driver"]["maxVolumesPerNode"]
    )
    for name in ("heartbeat-interval", "fence-interval", "node-grace"):
        assert re.fullmatch(r"[0-9]+(\.[0-9]+)?", flag(driver, name)), name


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


def test_metrics_port_only_when_enabled(rendered: Rendered) -> None:
    metrics = rendered.values["metrics"]
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        ports = {p["name"]: p["containerPort"] for p in driver["ports"]}
        has_flag = any(a.startswith("--metrics-address=") for a in driver["args"])
        if metrics["enabled"]:
            assert ports["metrics"] == metrics["port"]
            assert flag(driver, "metrics-address") == f":{metrics['port']}"
        else:
            assert "metrics" not in ports
            assert not has_flag


def test_liveness_probes_reach_the_livenessprobe_sidecar(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        ports = {p["name"]: p["containerPort"] for p in driver["ports"]}
        assert driver["livenessProbe"]["httpGet"]["port"] == "healthz"
        probe = container(spec, "liveness-probe")
        assert flag(probe, "http-endpoint") == f":{ports['healthz']}"


def test_notes_render(rendered: Rendered) -> None:
    notes = rendered.notes
    assert rendered.values["driverName"] in notes
    assert "ledger list" in notes
    assert rendered.values["controller"]["stateHostPath"] in notes


# ----- defaults only -----
@pytest.fixture
def defaults() -> Rendered:
    return rendered_case(Case("defaults", {}))


def test_default_sidecar_images_and_flags(defaults: Rendered) -> None:
    with_snapshots = rendered_case(Case("snapshot-api", {}, (SNAPSHOT_API,)))
    images = {
        c["name"]: c["image"]
        for spec in (controller_pod(with_snapshots), node_pod(with_snapshots))
        for c in spec["containers"]
        if c["name"] != "csi-hostpath"
    }
    assert images == SIDECAR_IMAGES
    provisioner = container(controller_pod(defaults), "csi-provisioner")
    assert "--feature-gates=Topology=true" in provisioner["args"]
    assert "--extra-create-metadata" in provisioner["args"]


def test_default_values(defaults: Rendered) -> None:
    assert defaults.values["pool"]["scope"] == "shared"
    assert defaults.values["driverName"] == "loop.hostpath.csi.dev"
    sts = defaults.one("StatefulSet")
    assert sts["spec"]["replicas"] == 1
    assert container(pod_spec(sts), "csi-hostpath")["image"] == "csi-hostpath:0.1.0"


def test_csidriver_spec(defaults: Rendered) -> None:
    spec = defaults.one("CSIDriver")["spec"]
    assert spec["attachRequired"] is True
    assert spec["podInfoOnMount"] is True
    assert spec["fsGroupPolicy"] == "File"
    # Inline ephemeral volumes are opt-in (tests/chart/test_inline_selinux.py).
    assert spec["volumeLifecycleModes"] == ["Persistent"]


def test_csidriver_asks_for_allocatable_updates(defaults: Rendered) -> None:
    """The kubelet calls NodeGetInfo again every period (and after a RESOURCE_EXHAUSTED attach),
    so CSINode's allocatable count follows the loop devices the node can still get."""
    spec = defaults.one("CSIDriver")["spec"]
    assert spec["nodeAllocatableUpdatePeriodSeconds"] == 60
    spec = chart_tool.render({"node": {"allocatableUpdatePeriodSeconds": 30}}).one("CSIDriver")
    assert spec["spec"]["nodeAllocatableUpdatePeriodSeconds"] == 30
    # 0 leaves it out (a static count), and so does a cluster older than the field (1.33).
    off = chart_tool.render({"node": {"allocatableUpdatePeriodSeconds": 0}}).one("CSIDriver")
    assert "nodeAllocatableUpdatePeriodSeconds" not in off["spec"]
    old = chart_tool.render(kube_version="1.32.0").one("CSIDriver")
    assert "nodeAllocatableUpdatePeriodSeconds" not in old["spec"]


def test_snapshots_can_be_turned_off_even_with_the_api() -> None:
    r = chart_tool.render({"snapshots": {"enabled": False}}, api_versions=[SNAPSHOT_API])
    assert not r.of_kind("VolumeSnapshotClass")
    assert "csi-snapshotter" not in {c["name"] for c in controller_pod(r)["containers"]}


def test_kube_version_reaches_the_engine() -> None:
    """The chart declares kubeVersion >=1.29; an older cluster must be refused, which proves the
    render really runs with the Kubernetes version we validate against."""
    assert f"Kubernetes:   v{KUBE_VERSION}" in rendered_case(Case("defaults", {})).notes
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmRenderError, match=r"needs Kubernetes 1\.29 or newer, not v1\.28"):
        chart_tool.render(kube_version="1.28.0")


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"pool": {"scope": "everywhere"}}, "/pool/scope"),
        ({"pool": {"hostPath": "relative/dir"}}, "/pool/hostPath"),
        ({"driver": {"image": {"tag": "latest"}}}, "/driver/image/tag"),
        ({"sidecars": {"attacher": {"image": {"tag": ""}}}}, "/sidecars/attacher/image/tag"),
        ({"storageClasses": {"fsType": "ntfs"}}, "/storageClasses/fsType"),
        ({"storageClasses": {"reclaimPolicy": "Recycle"}}, "/storageClasses/reclaimPolicy"),
        # null deletes a default in Helm, as `--set x=null` does.
        ({"node": {"resources": {"requests": {"memory": None}}}}, "/node/resources/requests"),
        ({"driverName": "Not_A_DNS_Name"}, "/driverName"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"nodes": {}}, "additional properties 'nodes'"),
        # The API server refuses a period under 10 s.
        ({"node": {"allocatableUpdatePeriodSeconds": 5}}, "/node/allocatableUpdatePeriodSeconds"),
    ],
)
def test_schema_refuses_bad_values(values: Obj, complaint: str) -> None:
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmValuesError) as e:
        chart_tool.render(values)
    assert complaint in str(e.value)


def _schema_properties(schema: Obj, root: Obj, path: str) -> Iterator[tuple[str, Obj]]:
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _schema_properties(sub, root, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _schema_properties(schema["items"], root, f"{path}[]")


def test_every_value_is_documented() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    for path, sub in _schema_properties(schema, schema, "values"):
        if path.endswith("[]") and "properties" not in sub:
            continue  # the element type of a list is described by the list
        assert sub.get("description"), f"{path} has no description in values.schema.json"
        if sub.get("type") == "object" and "properties" in sub:
            assert sub.get("additionalProperties") is False, f"{path} allows unknown keys"
    # values.yaml: a comment line right above every key, so the file documents itself too.
    previous = ""
    for number, line in enumerate((CHART_DIR / "values.yaml").read_text().splitlines(), 1):
        stripped = line.strip()
        if re.match(r"^[A-Za-z][A-Za-z0-9]*:", stripped):
            assert previous.startswith("#"), f"values.yaml:{number}: {stripped} is undocumented"
        if stripped:
            previous = stripped


def test_helm_lint_is_clean() -> None:
    report = chart_tool.lint()
    assert report.get("total_charts_linted") == 1
    assert chart_tool.lint_problems(report) == []


def test_chart_follows_the_project_version() -> None:
    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert chart["appVersion"] == project["version"]
    assert values["driver"]["image"]["tag"] == project["version"]


def test_strict_validation_really_rejects(defaults: Rendered) -> None:
    """Guard against a validator that passes everything: a broken copy must fail."""
    broken = copy.deepcopy(defaults.one("DaemonSet"))
    pod_spec(broken)["containers"][0]["mountPropagation"] = "Bidirectional"
    with pytest.raises(ValueError, match="mountPropagation"):
        chart_tool.validate(broken)
    bad_class = {
        "apiVersion": SNAPSHOT_API,
        "kind": "VolumeSnapshotClass",
        "metadata": {"name": "x"},
        "driver": "d",
        "deletionPolicy": "Maybe",
    }
    with pytest.raises(ValueError, match="deletionPolicy"):
        chart_tool.validate(bad_class)
    with pytest.raises(ValueError, match="duplicate key"):
        chart_tool.load_documents("a: 1\na: 2\n")
