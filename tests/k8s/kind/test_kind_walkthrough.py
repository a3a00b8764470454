"""examples/, docs/kind.md and mk/deploy.mk: the kind walk-through, checked offline.

Nothing here runs a cluster (there is no container engine in CI); the checks make sure that what a
reader applies is valid Kubernetes 1.35, fits the chart's defaults and the kind config, and that the
guide mentions every file it relies on.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import chart_tool
from tests.chart.chart_tool import ROOT

EXAMPLES = ROOT / "examples"
KIND_CONFIG = EXAMPLES / "kind-config.yaml"
GUIDE = ROOT / "docs" / "kind.md"
# kind's own configurations are no Kubernetes objects (tests/k8s/kind/test_kind_setup.py has them).
KIND_CONFIGS = (KIND_CONFIG, EXAMPLES / "kind-config-no-dev.yaml")
MANIFESTS = sorted(p for p in EXAMPLES.glob("*.yaml") if p not in KIND_CONFIGS)


def objects_of(path: Path) -> list[dict[str, Any]]:
    return chart_tool.load_documents(path.read_text())


def kind_node_names(config: dict[str, Any]) -> set[str]:
    """The node names kind gives: <cluster>-control-plane, <cluster>-worker, -worker2, ..."""
    names, workers = set(), 0
    for node in config["nodes"]:
        if node["role"] == "control-plane":
            names.add(f"{config['name']}-control-plane")
        else:
            workers += 1
            names.add(f"{config['name']}-worker" + (str(workers) if workers > 1 else ""))
    return names


def test_there_are_examples() -> None:
    assert len(MANIFESTS) >= 8, [p.name for p in MANIFESTS]


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_example_is_valid_kubernetes_1_35(path: Path) -> None:
    objects = objects_of(path)
    assert objects, f"{path.name} holds no object"
    for obj in objects:
        chart_tool.validate(obj)


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_example_fits_the_chart_and_the_cluster(path: Path) -> None:
    defaults = chart_tool.render().values
    classes = {
        defaults["storageClasses"]["immediate"]["name"],
        defaults["storageClasses"]["waitForFirstConsumer"]["name"],
    }
    nodes = kind_node_names(yaml.safe_load(KIND_CONFIG.read_text()))
    for obj in objects_of(path):
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "csi-demo", path.name
        if obj["kind"] == "PersistentVolumeClaim":
            assert obj["spec"]["storageClassName"] in classes, path.name
        if obj["kind"] == "Pod":
            spec = obj["spec"]
            hostname = spec.get("nodeSelector", {}).get("kubernetes.io/hostname")
            if hostname is not None:
                assert hostname in nodes, f"{path.name}: no kind node named {hostname}"
            for c in spec["containers"]:
                assert re.search(r":[0-9][\w.-]*$", c["image"]), f"{path.name}: {c['image']}"
                assert c["resources"]["requests"], path.name


def test_experiments_use_the_access_modes_they_show() -> None:
    modes = {
        obj["metadata"]["name"]: (obj["spec"]["accessModes"], obj["spec"]["storageClassName"])
        for path in MANIFESTS
        for obj in objects_of(path)
        if obj["kind"] == "PersistentVolumeClaim"
    }
    assert modes["shared-rwo"] == (["ReadWriteOnce"], "csi-hostpath")
    assert modes["exclusive"] == (["ReadWriteOncePod"], "csi-hostpath")
    assert modes["late"] == (["ReadWriteOnce"], "csi-hostpath-wffc")
    assert modes["moving"][0] == ["ReadWriteOnce"]
    assert modes["survivor"][0] == ["ReadWriteOnce"]
    pods = {
        obj["metadata"]["name"]: obj["spec"]
        for path in MANIFESTS
        for obj in objects_of(path)
        if obj["kind"] == "Pod"
    }
    # The move: the two pods are pinned to two different workers.
    hosts = {pods[n]["nodeSelector"]["kubernetes.io/hostname"] for n in ("mover-1", "mover-2")}
    assert len(hosts) == 2
    # The node that goes away never hosts the controller, and the rescue runs beside it.
    controller_labels = {
        "app.kubernetes.io/name": "csi-hostpath",
        "app.kubernetes.io/component": "controller",
    }
    anti = pods["doomed"]["affinity"]["podAntiAffinity"]
    near = pods["rescue"]["affinity"]["podAffinity"]
    for rule in (anti, near):
        term = rule["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["labelSelector"]["matchLabels"] == controller_labels
        assert term["namespaces"] == [chart_tool.NAMESPACE]


def test_kind_config_shares_the_pool_and_dev_with_every_node() -> None:
    config = yaml.safe_load(KIND_CONFIG.read_text())
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    assert sum(1 for n in config["nodes"] if n["role"] == "worker") >= 2
    values = chart_tool.render().values
    wanted = {
        values["pool"]["hostPath"]: "pool",
        values["controller"]["stateHostPath"]: "controller",
        "/dev": "/dev",
    }
    host_dirs: dict[str, set[str]] = {}
    for node in config["nodes"]:
        mounts = {m["containerPath"]: m["hostPath"] for m in node.get("extraMounts", [])}
        for container_path in wanted:
            assert container_path in mounts, f"{node['role']} lacks {container_path}"
            host_dirs.setdefault(container_path, set()).add(mounts[container_path])
        # The node plugin's own state must stay private to each node.
        assert values["node"]["stateHostPath"] not in mounts
    # One host directory behind each path, on every node: that is what makes the pool shared.
    for container_path, dirs in host_dirs.items():
        assert len(dirs) == 1, f"{container_path} comes from several host dirs: {dirs}"
    assert host_dirs["/dev"] == {"/dev"}
    # mk/deploy.mk creates the shared host directories before kind mounts them.
    makefile = (ROOT / "mk" / "deploy.mk").read_text()
    shared = re.search(r"^KIND_SHARED_DIR \?= (\S+)$", makefile, re.MULTILINE)
    assert shared
    for container_path in (values["pool"]["hostPath"], values["controller"]["stateHostPath"]):
        assert next(iter(host_dirs[container_path])).startswith(shared.group(1) + "/")


def test_guide_covers_every_example_and_target() -> None:
    guide = GUIDE.read_text()
    for path in [*MANIFESTS, KIND_CONFIG]:
        assert f"examples/{path.name}" in guide, f"docs/kind.md never uses {path.name}"
    for needed in (
        "make kind-up",
        "make kind-deploy",
        "make kind-down",
        "kubectl exec",
        "csi-hostpath ledger",
        "force-detach",
        "--reason",
        "out-of-service",
        "no container engine",
        "make chart-test",
        "Kubernetes 1.35",
    ):
        assert needed.lower() in guide.lower(), f"docs/kind.md does not mention {needed!r}"


def test_deploy_targets_exist() -> None:
    """`make -n` resolves every target of the fragment through the main Makefile."""
    targets = ("image", "chart-lint", "chart-test", "kind-up", "kind-down", "kind-deploy")
    # When `make test` runs this, the outer make's flags must not leak into the inner one.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    result = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *targets],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "-m pytest -q tests/chart" in out
    assert "-m tests.chart.chart_tool lint" in out
    assert re.search(r"docker build .*-t csi-hostpath:\d+\.\d+\.\d+", out)
    # kind-up and kind-down are scripts (tools/kind/); the cluster's name and config go to them.
    assert "KIND_CLUSTER=csi-hostpath KIND_CONFIG=examples/kind-config.yaml" in out
    assert "bash tools/kind/up.sh" in out and "bash tools/kind/down.sh" in out
    up = (ROOT / "tools" / "kind" / "up.sh").read_text()
    assert '"$kind" create cluster --name "$KIND_CLUSTER" --config "$config"' in up
    # `kind load docker-image` fails on Docker Engine 29; an archive works everywhere.
    assert re.search(r"docker save -o \S+/csi-hostpath-\S+\.tar csi-hostpath:", out)
    assert re.search(r"kind load image-archive \S+\.tar --name csi-hostpath", out)
    assert "load docker-image" not in out
    assert "upgrade --install csi-hostpath charts/csi-hostpath" in out
    down = (ROOT / "tools" / "kind" / "down.sh").read_text()
    assert '"$kind" delete cluster --name "$KIND_CLUSTER"' in down
