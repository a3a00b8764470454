"""tools/cluster/images.sh without root: image names, and its `list` and `path` formats.

tools/cluster/images.sh without root: its names are the ones the manifests use, and `list` and
`path` answer in the format the cluster scripts read. Building and running the images is
tests/k8s/images/test_images_real.py."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import chart_tool
from tests.chart.chart_tool import ROOT, SNAPSHOT_API
from tests.k8s.experiments.chart import SHAPE_VALUES, chart_values
from tests.k8s.images.pins import MINORS, minor_env, pins
from tests.k8s.test_project_clusters import helm_values

SCRIPT = ROOT / "tools" / "cluster" / "images.sh"
TABLE = ROOT / "tools" / "cluster" / "images" / "images.txt"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def e2e_manifest(minor: str | None = None) -> Path:
    """The e2e suite's image list at a minor's Kubernetes release, in the Go module cache."""
    return Path(
        os.environ.get("GOMODCACHE", Path.home() / "go" / "pkg" / "mod"),
        f"k8s.io/kubernetes@{pins(minor)['KUBERNETES_VERSION']}/test/utils/image/manifest.go",
    )


def images_sh(
    *args: str, cache: Path | None = None, minor: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = minor_env(minor)
    if cache is not None:
        env["CSI_HOSTPATH_CACHE"] = str(cache)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def names(minor: str | None = None) -> list[str]:
    result = images_sh("names", minor=minor)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def chart_images() -> set[str]:
    """Every image the chart runs with the values the project's clusters install it with
    (the driver's own registrar and probe), in both pool shapes, every optional API on."""
    apis = (SNAPSHOT_API, "groupsnapshot.storage.k8s.io/v1beta2", "storage.k8s.io/v1")
    found = set()
    for shape in SHAPE_VALUES:
        values = helm_values(chart_values(shape, []))
        rendered = chart_tool.render(values, api_versions=apis)
        for obj in rendered.objects:
            found.update(re.findall(r"'image': '([^']+)'", str(obj)))
    return found


def test_the_table_is_what_names_prints() -> None:
    rows = [
        line.split()
        for line in TABLE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert all(len(row) == 3 for row in rows), rows
    # A `none` row is an image the chart's defaults name and the script does not make.
    agnhost = pins()["AGNHOST_VERSION"]
    made = [
        row[0].replace("@VERSION@", VERSION).replace("@AGNHOST_VERSION@", agnhost)
        for row in rows
        if row[1] != "none"
    ]
    assert names() == made
    assert len(set(names())) == len(names())


def test_every_image_of_the_chart_is_made_here() -> None:
    made = set(names())
    images = chart_images()
    assert images, "the chart rendered no image"
    for image in images:
        assert image in made, f"the chart runs {image}, which images.sh does not make"


def test_the_driver_image_is_the_charts_and_the_projects_version() -> None:
    values = yaml.safe_load((ROOT / "charts/csi-hostpath/values.yaml").read_text())
    image = values["driver"]["image"]
    assert f"{image['repository']}:{image['tag']}" in names()
    assert image["tag"] == VERSION


def test_the_sidecar_tags_are_module_versions() -> None:
    """The go recipe refuses a binary whose module version is not the tag; so every tag of a
    kubernetes-csi image is a release tag."""
    for line in TABLE.read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[1] == "go" and "/sig-storage/" in words[0]:
            assert re.fullmatch(r"v\d+\.\d+\.\d+", words[0].rsplit(":", 1)[1]), line


def example_images() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for image in re.findall(r"'image': '([^']+)'", str(doc)):
                yield path.name, image


def test_every_image_of_the_examples_is_made_here() -> None:
    made = set(names())
    found = list(example_images())
    assert found, "no image in examples/"
    for where, image in found:
        assert image in made, f"examples/{where} runs {image}, which images.sh does not make"


def e2e_images(minor: str | None = None) -> dict[str, str]:
    """ImageID -> registry/name:tag of the suite's list, read from manifest.go."""
    text = e2e_manifest(minor).read_text()
    registries = dict(re.findall(r'(\w+Registry):\s+"([^"]+)"', text))
    found = {}
    for image_id, reg, name, tag in re.findall(
        r'configs\[(\w+)\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}', text
    ):
        found[image_id] = f"{registries[reg]}/{name}:{tag}"
    return found


@pytest.mark.parametrize("minor", MINORS)
def test_the_e2e_suites_busybox_name(minor: str | None) -> None:
    if not e2e_manifest(minor).is_file():
        pytest.skip(f"no {e2e_manifest(minor)} in the module cache")
    suite = e2e_images(minor)
    assert suite["BusyBox"] in names(minor)
    # Every e2e-test-images name made here is one that minor's suite asks for, at its tag.
    for name in names(minor):
        if "/e2e-test-images/" in name:
            assert name in suite.values(), f"{name} is not in the suite's manifest.go"


def test_list_prints_name_and_archive_of_what_exists(tmp_path: Path) -> None:
    assert images_sh("list", cache=tmp_path).stdout == ""
    result = images_sh("path", f"csi-hostpath:{VERSION}", cache=tmp_path)
    assert result.returncode == 0, result.stderr
    archive = Path(result.stdout.strip())
    # A versioned name beside the normalized image name: <tag>-<16 hex digits of its inputs>.
    assert archive.parent == tmp_path / "images" / "docker.io" / "library" / "csi-hostpath"
    assert re.fullmatch(rf"{re.escape(VERSION)}-[0-9a-f]{{16}}\.tar", archive.name)
    archive.parent.mkdir(parents=True)
    archive.with_name(archive.name + ".partial").write_text("interrupted")
    assert images_sh("list", cache=tmp_path).stdout == "", "a .partial is not an archive"
    archive.write_text("stand-in")
    listed = images_sh("list", cache=tmp_path)
    assert listed.returncode == 0, listed.stderr
    # The name containerd stores once it imports the archive, which the kubelet looks up for the
    # chart's bare `csi-hostpath:VERSION`.
    assert listed.stdout.splitlines() == [f"docker.io/library/csi-hostpath:{VERSION} {archive}"]


def test_path_of_an_unknown_image_fails_naming_the_list() -> None:
    result = images_sh("path", "example.org/nothing:v1")
    assert result.returncode == 1
    assert "images.sh names" in result.stderr


def test_an_image_whose_binary_is_not_built_has_no_path(tmp_path: Path) -> None:
    """`path` (and so `list`) of a go image waits for its binary; build says why it skips."""
    result = images_sh("path", "registry.k8s.io/sig-storage/csi-attacher:v4.13.1", cache=tmp_path)
    if result.returncode == 0:
        pytest.skip("csi-attacher is built on this machine")
    assert "build.sh" in result.stderr


def test_the_driver_build_passes_the_local_base() -> None:
    """The Dockerfile keeps the official base by default; images.sh gives it the one it made."""
    driver = (ROOT / "tools/cluster/images/driver.sh").read_text()
    assert '--build-arg "BASE_IMAGE=$base_ref"' in driver
    base = (ROOT / "tools/cluster/images/base.sh").read_text()
    assert "debootstrap --variant=minbase" in base


def test_the_key_follows_the_drivers_sources(tmp_path: Path) -> None:
    """A change to any file the image is made from is a new archive name (so never a stale image
    under the current name): seen on a copy of the inputs."""
    copy = tmp_path / "repo"
    for rel in (
        "tools/cluster",
        "csi_hostpath",
        "pyproject.toml",
        "README.md",
        "Dockerfile",
        ".dockerignore",
    ):
        src = ROOT / rel
        dst = copy / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    script = copy / "tools" / "cluster" / "images.sh"

    def path() -> str:
        env: dict[str, Any] = {**os.environ, "CSI_HOSTPATH_CACHE": str(tmp_path / "cache")}
        result = subprocess.run(
            ["bash", str(script), "path", f"csi-hostpath:{VERSION}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=env,
        )
        return result.stdout.strip()

    first = path()
    assert path() == first
    module = copy / "csi_hostpath" / "cli" / "main.py"
    module.write_text(module.read_text() + "\n# changed\n")
    assert path() != first


@pytest.mark.parametrize("minor", MINORS)
def test_the_agnhost_tag_is_the_pinned_agnhost(minor: str | None) -> None:
    """agnhost's image tag is the VERSION of test/images/agnhost in the Kubernetes release that
    KUBERNETES_VERSION selects, which versions.env (or that minor's file) names."""
    agnhost = [n for n in names(minor) if "/e2e-test-images/agnhost:" in n]
    want = pins(minor)["AGNHOST_VERSION"]
    assert agnhost == [f"registry.k8s.io/e2e-test-images/agnhost:{want}"]


@pytest.mark.parametrize(
    "dockerfile", sorted((ROOT / "tools/cluster/images").glob("*.Dockerfile")), ids=lambda p: p.name
)
def test_the_e2e_dockerfiles_are_hadolint_clean(dockerfile: Path) -> None:
    from tests.chart.test_dockerfile import run_hadolint

    result = run_hadolint(dockerfile)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    assert dockerfile.read_text().startswith("# "), "say what the image is for"
    assert "ARG BASE_IMAGE=" in dockerfile.read_text()


@pytest.mark.parametrize("name", names())
def test_every_image_has_a_check_that_ends_by_itself(name: str) -> None:
    """An image run with no arguments may start a shell that waits on its input forever (Debian's
    base runs bash): each image's check names the command it runs."""
    result = images_sh("check-args", name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(), f"{name}: no check command"
