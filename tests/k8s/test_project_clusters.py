"""Every way the project's clusters install the chart picks the driver image's own helpers.

Every way this project's own clusters install the chart selects the driver image's own registrar
and liveness probe. The chart's defaults name kubernetes-csi's images, which those clusters can
neither pull nor build (the Go module proxy refuses both modules), so a default there would leave
the node plugin in ImagePullBackOff. The ways: the experiments' installer
(tests/k8s/experiments/chart.py, which tools/kind-e2e.sh runs on kind:
tests/k8s/kind/test_kind_e2e.py) and the e2e suite's releases (tools/cluster/k8s-e2e.sh with
tests/k8s/storage_e2e/values*.yaml)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.chart import chart_tool
from tests.chart.chart_objects import controller_pod, node_pod
from tests.chart.chart_tool import ROOT
from tests.chart.test_kubelet_helpers import HELPERS
from tests.k8s.experiments.chart import SHAPE_VALUES, chart_values

Obj = dict[str, Any]

K8S_E2E = ROOT / "tools" / "cluster" / "k8s-e2e.sh"
SUITE = ROOT / "tests" / "k8s" / "storage_e2e"


def helm_values(argv: list[str]) -> Obj:
    """The values the `--set K=V` and `--set-string K=V` flags of a helm command line give.

    Plain dotted keys only (no lists or escapes), which is all the project's scripts use; every
    value stays a string, as --set-string would have it.
    """
    values: Obj = {}
    args = iter(argv)
    for a in args:
        if a in ("--set", "--set-string"):
            pair = next(args)
        elif a.startswith(("--set=", "--set-string=")):
            pair = a.split("=", 1)[1]
        else:
            continue
        key, _, value = pair.partition("=")
        assert not set(key) & set("[],\\"), f"not a plain key: {pair}"
        *path, last = key.split(".")
        node = values
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return values


def helper_images(values: Obj) -> dict[str, tuple[str, str]]:
    """container name -> (image, first arg) of every registrar and liveness probe rendered."""
    r = chart_tool.render(values)
    specs = [node_pod(r), *([controller_pod(r)] if r.of_kind("StatefulSet") else [])]
    return {
        c["name"]: (c["image"], c["args"][0])
        for spec in specs
        for c in spec["containers"]
        if c["name"] in HELPERS
    }


def assert_own_helpers(values: Obj) -> None:
    """The chart under these values runs both helpers from the driver's image."""
    r = chart_tool.render(values)
    image = r.values["driver"]["image"]
    found = helper_images(values)
    assert set(found) == set(HELPERS)
    for name, (helper_image, first) in found.items():
        assert helper_image == f"{image['repository']}:{image['tag']}", name
        assert first == HELPERS[name], name


@pytest.mark.parametrize("shape", sorted(SHAPE_VALUES))
def test_the_experiments_installer_selects_the_projects_helpers(shape: str) -> None:
    values = helm_values(chart_values(shape, []))
    assert values["sidecars"]["nodeDriverRegistrar"]["implementation"] == "csi-hostpath"
    assert_own_helpers(values)


def test_the_runners_own_values_still_override() -> None:
    extra = ["--set", "sidecars.livenessProbe.implementation=upstream"]
    found = helper_images(helm_values(chart_values("shared", extra)))
    assert found["liveness-probe"][0] == "registry.k8s.io/sig-storage/livenessprobe:v2.19.0"


def suite_value_files() -> list[str]:
    """The -f files of every `helm upgrade --install` in tools/cluster/k8s-e2e.sh."""
    text = K8S_E2E.read_text().replace("\\\n", " ")
    installs = [line for line in text.splitlines() if re.search(r"HELM\"? upgrade --install", line)]
    assert installs, f"no helm upgrade --install in {K8S_E2E}"
    files = []
    for line in installs:
        named = re.findall(r'-f "\$SUITE/([^"]+)"', line)
        assert named, f"a release of k8s-e2e.sh without a values file: {line.strip()}"
        files.extend(named)
    return files


def test_every_e2e_suite_release_selects_the_projects_helpers() -> None:
    files = suite_value_files()
    assert sorted(files) == ["values-local.yaml", "values.yaml"]
    for name in files:
        values = yaml.safe_load((SUITE / name).read_text())
        assert values["sidecars"]["livenessProbe"]["implementation"] == "csi-hostpath", name
        assert_own_helpers(values)
