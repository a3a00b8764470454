"""The chart's defaults, and single values that change them.

Sidecar images and flags, the CSIDriver spec, snapshots off, and the version the chart follows."""

from __future__ import annotations

import tomllib

from tests.chart import chart_tool
from tests.chart.chart_objects import (
    UPSTREAM_HELPER_IMAGES,
    container,
    controller_pod,
    node_pod,
    pod_spec,
)
from tests.chart.chart_tool import CHART_DIR, ROOT, SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case

SIDECAR_IMAGES = {
    "csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v6.4.1",
    "csi-attacher": "registry.k8s.io/sig-storage/csi-attacher:v4.13.1",
    "csi-resizer": "registry.k8s.io/sig-storage/csi-resizer:v2.3.1",
    "csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
    **UPSTREAM_HELPER_IMAGES,
}


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


def test_chart_follows_the_project_version() -> None:
    import yaml

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert chart["appVersion"] == project["version"]
    assert values["driver"]["image"]["tag"] == project["version"]
