"""The e2e run's chart values give the suite's patterns what they need on this project's machines.

Upstream: k8s.io/kubernetes v1.35.4 test/e2e/storage/testsuites/volume_expand.go and
ephemeral.go (online expansion runs with the default fs only), topology.go (its
AllowedTopologies spec runs with Immediate and WaitForFirstConsumer binding), and
external-provisioner v6.4.1 pkg/controller/controller.go (checkNode: a node-deployed provisioner
takes an Immediate claim only with --node-deployment-immediate-binding=true)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.chart import chart_tool
from tests.chart.chart_objects import container, node_pod

HERE = Path(__file__).parent

# Filesystems whose mounted growth works without CAP_SYS_RESOURCE, which no process on the
# project's machines has: xfs_growfs needs none; resize2fs on a mounted ext4 is refused.
GROWS_ONLINE_WITHOUT_CAP_SYS_RESOURCE = {"xfs"}


def values(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((HERE / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_default_fs_of_the_shared_run_grows_while_mounted_here() -> None:
    r = chart_tool.render(values("values.yaml"))
    fstypes = {sc["parameters"]["csi.storage.k8s.io/fstype"] for sc in r.of_kind("StorageClass")}
    assert fstypes and fstypes <= GROWS_ONLINE_WITHOUT_CAP_SYS_RESOURCE


def test_the_local_run_serves_the_topology_suites_immediate_claims() -> None:
    declared = yaml.safe_load((HERE / "test-driver-local.yaml").read_text())
    assert declared["DriverInfo"]["Capabilities"]["topology"] is True
    r = chart_tool.render(values("values-local.yaml"))
    prov = container(node_pod(r), "csi-provisioner")
    assert "--node-deployment-immediate-binding=true" in prov["args"]
