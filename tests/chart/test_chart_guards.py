"""The chart's guards and its tooling refuse what is wrong.

The schema refuses bad values and documents every value, kubeVersion refuses an old cluster, helm
lint is clean, and the validator really rejects."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator

import pytest

from tests.chart import chart_tool
from tests.chart.chart_objects import Obj, pod_spec
from tests.chart.chart_tool import CHART_DIR, KUBE_VERSION, SNAPSHOT_API, Rendered
from tests.chart.conftest import Case, rendered_case


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
