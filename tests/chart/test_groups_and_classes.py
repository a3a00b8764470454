"""Group snapshots and VolumeAttributesClasses in the chart, only where the cluster serves them.

Group snapshots and VolumeAttributesClasses in the chart: each rendered only where the
cluster serves its API, with the sidecar flag and RBAC of the pinned external-snapshotter v8.7.0
(cmd/csi-snapshotter/main.go, deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml). Its
group snapshot gate is GA and on by default there, so the chart passes it only to turn it off."""

from __future__ import annotations

from typing import Any

from csi_hostpath.core.mutable import parse_mutable
from tests.chart.chart_objects import container, controller_pod
from tests.chart.chart_tool import SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case

GROUP_API = "groupsnapshot.storage.k8s.io/v1beta2"
VAC_API = "storage.k8s.io/v1/VolumeAttributesClass"
GATE = "--feature-gates=CSIVolumeGroupSnapshot"
GATE_OFF = f"{GATE}=false"


def _snapshotter_rules(r: Rendered) -> list[dict[str, Any]]:
    role = next(
        o
        for o in r.objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-snapshotter")
    )
    return list(role["rules"])


def test_group_snapshots_where_the_api_is_served() -> None:
    r = rendered_case(Case("groups", {}, (SNAPSHOT_API, GROUP_API)))
    group_class = r.one("VolumeGroupSnapshotClass")
    assert group_class["driver"] == r.values["driverName"]
    assert group_class["deletionPolicy"] == "Delete"
    args = container(controller_pod(r), "csi-snapshotter")["args"]
    assert not any(a.startswith(GATE) for a in args), args
    granted = {
        (res, verb)
        for rule in _snapshotter_rules(r)
        if rule["apiGroups"] == ["groupsnapshot.storage.k8s.io"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("volumegroupsnapshotcontents", "update") in granted
    assert ("volumegroupsnapshotcontents/status", "patch") in granted
    assert ("volumegroupsnapshotclasses", "watch") in granted
    assert not any(verb == "create" for _, verb in granted)


def test_no_group_snapshots_without_the_api_or_when_off() -> None:
    for case in (
        Case("snapshots-only", {}, (SNAPSHOT_API,)),
        Case(
            "groups-off", {"snapshots": {"groups": {"enabled": False}}}, (SNAPSHOT_API, GROUP_API)
        ),
    ):
        r = rendered_case(case)
        assert not [o for o in r.objects if o["kind"] == "VolumeGroupSnapshotClass"]
        assert GATE_OFF in container(controller_pod(r), "csi-snapshotter")["args"]
        assert not any(
            rule["apiGroups"] == ["groupsnapshot.storage.k8s.io"] for rule in _snapshotter_rules(r)
        )


def test_volume_attributes_classes_where_the_api_is_served() -> None:
    r = rendered_case(Case("vac", {}, (VAC_API,)))
    classes = [o for o in r.objects if o["kind"] == "VolumeAttributesClass"]
    assert [c["metadata"]["name"] for c in classes] == ["csi-hostpath-throttled"]
    for vac in classes:
        assert vac["driverName"] == r.values["driverName"]
        parse_mutable(vac["parameters"])  # every key and value is one the driver takes
    none = rendered_case(Case("no-vac-api", {}))
    assert not [o for o in none.objects if o["kind"] == "VolumeAttributesClass"]


def test_the_resizer_may_read_volume_attributes_classes(rendered: Rendered) -> None:
    if not rendered.values["sidecars"]["resizer"]["enabled"]:
        return
    role = next(
        o
        for o in rendered.objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-resizer")
    )
    assert any(
        "volumeattributesclasses" in rule["resources"] and "watch" in rule["verbs"]
        for rule in role["rules"]
    )
