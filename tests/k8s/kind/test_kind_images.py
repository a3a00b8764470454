"""The kind path makes, or reports, every image the chart and the experiments name.

Every image the chart and the experiments name is made by the kind path (make kind-up, make
kind-e2e), or reported by it as not made here, with the chart value that replaces it; and every
program the experiments take from the build cache is built by it. Offline: nothing is built, the
cache is an empty directory, as on a new machine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart import chart_tool
from tests.chart.chart_tool import CBT_API, ROOT, SNAPSHOT_API
from tests.k8s.experiments import context, exp_cbt
from tests.k8s.experiments.chart import SHAPE_VALUES, chart_values, pinned
from tests.k8s.images.pins import pins
from tests.k8s.test_project_clusters import helm_values

CLUSTER = ROOT / "tools" / "cluster"
EXPERIMENTS = ROOT / "tests" / "k8s" / "experiments"
# Every optional API on, so that every optional container renders.
APIS = (SNAPSHOT_API, CBT_API, "groupsnapshot.storage.k8s.io/v1beta2", "storage.k8s.io/v1")
# The build group tools/kind/up.sh and tools/kind-e2e.sh build before anything else.
KIND_GROUP = "kind"


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return {**env, "CSI_HOSTPATH_CACHE": str(cache)}


def _bash(cache: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *argv], capture_output=True, text=True, timeout=120, check=False, env=_env(cache)
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty-cache")


@pytest.fixture(scope="module")
def kind_builds(cache: Path) -> set[str]:
    """The programs `tools/cluster/build.sh kind` builds (its `versions` names them, built or
    not, and builds nothing)."""
    done = _bash(cache, str(CLUSTER / "build.sh"), "versions", KIND_GROUP)
    assert done.returncode == 0, done.stderr
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def table() -> dict[str, tuple[str, str]]:
    """images.txt: NAME:TAG -> (RECIPE, SOURCE), the driver's tag filled in."""
    version = re.search(r'^version = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version
    rows = {}
    for line in (CLUSTER / "images" / "images.txt").read_text().splitlines():
        words = line.split()
        if len(words) == 3 and not line.startswith("#"):
            name = words[0].replace("@VERSION@", version.group(1))
            rows[name.replace("@AGNHOST_VERSION@", pins()["AGNHOST_VERSION"])] = (
                words[1],
                words[2],
            )
    return rows


def chart_images() -> dict[str, str]:
    """image -> where it is named: the chart as a user installs it (its defaults) and as the
    experiments install it, both pool shapes."""
    found: dict[str, str] = {}
    value_sets: dict[str, dict[str, Any]] = {"the chart's defaults": {}}
    for shape in SHAPE_VALUES:
        value_sets[f"the experiments' {shape} shape"] = helm_values(chart_values(shape, []))
    for where, values in value_sets.items():
        for obj in chart_tool.render(values, api_versions=APIS).objects:
            for image in re.findall(r"'image': '([^']+)'", str(obj)):
                found.setdefault(image, where)
    return found


def experiment_images() -> dict[str, str]:
    """image -> where: what the experiments run besides the chart."""
    found = {
        context.BUSYBOX: "tests/k8s/experiments/context.py",
        exp_cbt.LISTER: "tests/k8s/experiments/exp_cbt.py",
        "registry.k8s.io/sig-storage/snapshot-controller:"
        + pinned("CSI_SNAPSHOTTER_VERSION"): "tests/k8s/experiments/chart.py",
    }
    # Any image written out in an experiment must be one of those.
    for path in sorted(p for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("test_")):
        for image in re.findall(r'"image": "([^"]+)"', path.read_text()):
            assert image in found, f"{path.name} runs {image}: add it to experiment_images()"
    return found


def needed_program(recipe: str, source: str) -> str | None:
    """The build.sh program an image's recipe puts in it, if any."""
    if recipe in ("go", "gobin") and not source.startswith("/"):
        return source
    if recipe == "debian" and ":" in source:
        return source.split(":", 1)[1]
    return None


def test_every_image_is_made_by_the_kind_path_or_reported(
    cache: Path, kind_builds: set[str]
) -> None:
    rows = table()
    images = {**chart_images(), **experiment_images()}
    assert len(images) > 8, images
    done = _bash(cache, str(CLUSTER / "images.sh"), "unmade")
    unmade = dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())
    problems = []
    for image, where in sorted(images.items()):
        if image not in rows:
            problems.append(f"{image} ({where}): in no row of tools/cluster/images/images.txt")
            continue
        recipe, source = rows[image]
        if recipe == "none":
            if image not in unmade or source not in unmade[image]:
                problems.append(f"{image} ({where}): images.sh unmade does not report it")
            continue
        program = needed_program(recipe, source)
        if program is not None and program not in kind_builds:
            problems.append(
                f"{image} ({where}): needs {program}, which `build.sh {KIND_GROUP}` does not build"
            )
    assert not problems, "\n".join(problems)


def test_every_program_the_experiments_read_is_built_by_the_kind_path(
    kind_builds: set[str],
) -> None:
    """The snapshot CRDs, the snapshot-controller's manifests, the snapshot metadata CRDs, kubectl
    and helm: what the runner and tools/kind-e2e.sh take from the cache."""
    wanted = set(re.findall(r'built\("([\w.-]+)"\)', (EXPERIMENTS / "runner.py").read_text()))
    script = (ROOT / "tools" / "kind-e2e.sh").read_text()
    wanted |= set(re.findall(r"build\.sh path ([\w.-]+)", script))
    assert {"snapshot-crds", "kubectl", "helm"} <= wanted, wanted
    missing = sorted(wanted - kind_builds)
    assert not missing, f"the experiments read {missing}, which `build.sh {KIND_GROUP}` leaves out"


def test_the_kind_path_builds_before_it_loads() -> None:
    """kind-up builds the group itself (a new machine has an empty cache), and images.sh stops on
    an image whose program is missing instead of skipping it."""
    up = (ROOT / "tools" / "kind" / "up.sh").read_text()
    assert f'tools/cluster/build.sh" {KIND_GROUP}' in up, "tools/kind/up.sh builds nothing"
    images = (CLUSTER / "images.sh").read_text()
    assert "skipped" not in images


def test_images_sh_names_what_is_missing_on_an_empty_cache(cache: Path) -> None:
    """With nothing built, `images.sh missing` exits 1 and names each image that waits for a
    program with the command that builds it."""
    done = _bash(cache, str(CLUSTER / "images.sh"), "missing")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = table()
    for image, (recipe, source) in rows.items():
        program = needed_program(recipe, source)
        if program is not None:
            assert f"tools/cluster/build.sh {program}" in done.stdout, (image, done.stdout)
