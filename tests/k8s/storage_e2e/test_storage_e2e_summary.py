"""The storage e2e run's summary: only the specs the run chose, each skip with its reason.

The summary of a run counts only the External Storage specs the run chose, and names why each
skipped one was skipped. The report here has the shape of Ginkgo v2's --json-report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.k8s.storage_e2e import summary

LEFT_OUT = [
    "--left-out",
    "they restart the kubelet",
    r"\[Disruptive\]",
    "--left-out",
    "no SELinux here",
    r"\[Feature:SELinux\]",
]
DRIVER = "External Storage [Driver: loop.hostpath.csi.dev]"


def _spec(containers: list[str], leaf: str, state: str, message: str = "") -> dict[str, object]:
    rep: dict[str, object] = {
        "ContainerHierarchyTexts": containers,
        "LeafNodeText": leaf,
        "LeafNodeType": "It",
        "State": state,
        "RunTime": 12_500_000_000,
    }
    if message:
        rep["Failure"] = {"Message": message, "Location": {"FileName": "x.go", "LineNumber": 1}}
    return rep


def _report() -> list[dict[str, object]]:
    pattern = [DRIVER, "[Testpattern: Dynamic PV (default fs)]", "provisioning"]
    return [
        {
            "SuiteDescription": "Kubernetes e2e suite",
            "SpecReports": [
                {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
                _spec(pattern, "should provision storage with defaults", "passed"),
                _spec(
                    pattern,
                    "should mount multiple PV pointing to the same storage",
                    "failed",
                    "Timed out after 300s.\nExpected pod to be running",
                ),
                _spec(
                    [DRIVER, "[Testpattern: Pre-provisioned PV (default fs)]", "volumes"],
                    "should store data",
                    "skipped",
                    'Driver "loop.hostpath.csi.dev" does not support volume type '
                    '"PreprovisionedPV" - skipping',
                ),
                _spec(
                    [DRIVER, "[Testpattern: Inline-volume (default fs)]", "volumes"],
                    "should store data",
                    "skipped",
                    'Driver "loop.hostpath.csi.dev" does not support volume type '
                    '"PreprovisionedPV" - skipping',
                ),
                _spec(
                    [
                        DRIVER,
                        "[Testpattern: Dynamic PV (default fs)]",
                        "disruptive",
                        "[Disruptive]",
                    ],
                    "should restart the kubelet",
                    "skipped",
                ),
                # Outside the focus: not part of the run at all.
                _spec(["[sig-network] Services"], "should serve a basic endpoint", "skipped"),
                _spec(["[sig-network] Services"], "should be flaky", "failed", "boom"),
            ],
        }
    ]


def test_counts_only_the_suites_specs_and_groups_skips_by_reason(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report()))
    out, js = tmp_path / "summary.md", tmp_path / "summary.json"
    assert summary.main([str(report), *LEFT_OUT, "--out", str(out), "--json", str(js)]) == 0

    data = json.loads(js.read_text())
    assert data["counts"] == {"passed": 1, "failed": 1, "skipped": 2, "excluded": 1, "pending": 0}
    reason = (
        'Driver "loop.hostpath.csi.dev" does not support volume type "PreprovisionedPV" - skipping'
    )
    assert list(data["skipped"]) == [reason]
    assert len(data["skipped"][reason]) == 2
    assert data["excluded"] == {
        "they restart the kubelet": [
            f"{DRIVER} [Testpattern: Dynamic PV (default fs)] disruptive [Disruptive] "
            "should restart the kubelet"
        ]
    }
    text = out.read_text()
    assert "passed 1, failed 1, skipped by the suite 2, left out by --skip 1" in text
    assert "should mount multiple PV pointing to the same storage (failed, 12 s): Timed out" in text
    assert "sig-network" not in text


def test_a_missing_report_is_an_error_not_an_empty_summary(tmp_path: Path) -> None:
    assert summary.main([str(tmp_path / "nothing.json")]) == 1
