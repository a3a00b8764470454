"""Fixtures of the chart tests: renders of charts/csi-hostpath under several value sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.chart import chart_tool
from tests.chart.chart_tool import CBT_API, SNAPSHOT_API, Rendered


@dataclass(frozen=True)
class Case:
    """A value set, and the API versions the pretend cluster serves."""

    name: str
    values: dict[str, Any]
    api_versions: tuple[str, ...] = ()


CASES = (
    Case("defaults", {}),
    Case(
        "custom-driver-name",
        {"driverName": "pool.storage.example.org", "node": {"kubeletDir": "/var/lib/k0s/kubelet"}},
    ),
    Case(
        "xfs-retain",
        {
            "storageClasses": {
                "fsType": "xfs",
                "reclaimPolicy": "Retain",
                "allowVolumeExpansion": False,
                "mountOptions": ["noatime"],
                "waitForFirstConsumer": {"isDefault": True},
            },
            "sidecars": {"resizer": {"enabled": False}},
        },
    ),
    Case(
        "snapshot-api",
        {"snapshots": {"volumeSnapshotClass": {"deletionPolicy": "Retain", "isDefault": True}}},
        (SNAPSHOT_API,),
    ),
    # Changed-block tracking: the external-snapshot-metadata sidecar and its objects.
    Case("snapshot-metadata", {}, (SNAPSHOT_API, CBT_API)),
    Case(
        "custom-images",
        {
            "imagePullSecrets": [{"name": "regcred"}],
            "driver": {
                "image": {
                    "repository": "registry.example.org:5000/storage/csi-hostpath",
                    "tag": "0.1.0-rc.1",
                    "pullPolicy": "Always",
                }
            },
            "sidecars": {
                "provisioner": {"image": {"repository": "mirror.example.org/csi-provisioner"}},
                # An upstream registrar of another release beside the driver's own probe.
                "nodeDriverRegistrar": {"image": {"tag": "v2.16.0"}},
                "livenessProbe": {"implementation": "csi-hostpath"},
            },
        },
        (SNAPSHOT_API,),
    ),
    # The registrar and the liveness probe from the driver's image, not kubernetes-csi's: what
    # the project's own clusters select (tests/k8s/test_project_clusters.py).
    Case(
        "project-helpers",
        {
            "sidecars": {
                "nodeDriverRegistrar": {"implementation": "csi-hostpath"},
                "livenessProbe": {"implementation": "csi-hostpath"},
            }
        },
    ),
    Case(
        "metrics-no-election",
        {
            "fullnameOverride": "storage",
            "metrics": {"enabled": True, "port": 9900},
            "controller": {"leaderElection": False},
            "driver": {"maxVolumeSize": 10 * 1024**3, "maxVolumesPerNode": 40},
        },
    ),
)


# The many-machines shape (pool.scope local) has no controller StatefulSet: its own tests are in
# test_local_shape.py, over these cases.
LOCAL_CASES = (
    Case("local-scope", {"pool": {"scope": "local", "hostPath": "/mnt/csi-pool"}}),
    Case(
        "local-snapshots-no-metrics",
        {"pool": {"scope": "local"}, "metrics": {"enabled": False}},
        (SNAPSHOT_API,),
    ),
)


@pytest.fixture(scope="session", params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    value: Case = request.param
    return value


_renders: dict[str, Rendered] = {}


def rendered_case(case: Case) -> Rendered:
    """Each case is rendered once per session; the tests only read the result."""
    if case.name not in _renders:
        try:
            _renders[case.name] = chart_tool.render(case.values, api_versions=case.api_versions)
        except chart_tool.ToolMissing as e:
            pytest.fail(str(e), pytrace=False)
    return _renders[case.name]


@pytest.fixture
def rendered(case: Case) -> Rendered:
    return rendered_case(case)


@pytest.fixture
def defaults() -> Rendered:
    """The chart rendered with its default values and no extra API."""
    return rendered_case(Case("defaults", {}))
