"""The cluster's images for real: built, imported into a throwaway containerd, and run there.

The images for real: built by tools/cluster/images.sh into the cache (reused when there), then
imported into a throwaway containerd of their own and run there, as the cluster's nodes will.

Each test also checks that nothing of the throwaway containerd is left: no directory, mount,
process or cgroup.
"""

from __future__ import annotations

import glob
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.chart.chart_tool import ROOT

pytestmark = pytest.mark.real

SCRIPT = ROOT / "tools" / "cluster" / "images.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
THROWAWAY = "/tmp/csi-hostpath-images-ctr."


def images_sh(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def leftovers() -> set[str]:
    """What a throwaway containerd could leave: its directory, mounts under it, processes naming
    it, the cgroups of its containers."""
    found = set(glob.glob(THROWAWAY + "*"))
    found.update(
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(THROWAWAY)
    )
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            text = Path(cmdline).read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if THROWAWAY in text:
            found.add(f"{cmdline}: {text}")
    found.update(glob.glob("/sys/fs/cgroup/*/csi-hostpath-check-*"))
    return found


def build(name: str, timeout: float = 600) -> None:
    result = images_sh("build", name, timeout=timeout)
    assert result.returncode == 0, result.stderr
    stored = name if "/" in name else f"docker.io/library/{name}"
    listed = images_sh("list").stdout.splitlines()
    assert any(line.split()[0] == stored for line in listed), (listed, result.stderr)


BUSYBOXES = ["busybox:1.37.0", "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"]


@pytest.mark.parametrize("name", BUSYBOXES)
def test_a_busybox_archive_imports_under_its_name_and_runs(name: str) -> None:
    before = leftovers()
    build(name)
    result = images_sh("check", name, "sh", "-c", 'echo "$((6 * 7)) from $(busybox | head -n 1)"')
    assert result.returncode == 0, result.stderr
    stored = name if "/" in name else f"docker.io/library/{name}"
    assert f"imported as {stored}" in result.stderr
    assert result.stdout.startswith("42 from BusyBox v"), result.stdout
    assert leftovers() == before


def test_a_failing_command_fails_the_check_and_leaves_nothing() -> None:
    before = leftovers()
    build("busybox:1.37.0")
    result = images_sh("check", "busybox:1.37.0", "sh", "-c", "echo about to fail; exit 3")
    assert result.returncode != 0
    assert "about to fail" in result.stdout
    assert leftovers() == before


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_driver_image_builds_from_the_dockerfile_and_serves() -> None:
    """From nothing this debootstraps the base and runs the Dockerfile (a few minutes); warm, it
    only imports and runs. The check runs the image's own command (--help) and `serve` as the
    entrypoint the chart uses, then asks the socket GetPluginInfo and Probe."""
    before = leftovers()
    build(f"csi-hostpath:{VERSION}", timeout=1500)
    result = images_sh("check", f"csi-hostpath:{VERSION}")
    assert result.returncode == 0, result.stderr
    assert "its own command: usage: csi-hostpath" in result.stderr
    assert "serve answered GetPluginInfo loop.hostpath.csi.dev" in result.stderr
    assert "Probe ready=True" in result.stderr
    assert leftovers() == before


def other_images() -> list[str]:
    """Every image but the driver and busybox, which the tests above run in detail."""
    result = images_sh("names", timeout=60)
    assert result.returncode == 0, result.stderr
    return [n for n in result.stdout.split() if "busybox" not in n and "csi-hostpath:" not in n]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", other_images())
def test_every_other_image_passes_its_own_check(name: str) -> None:
    """The sidecars print their module's version (--version, through the entrypoint), agnhost its
    tag, nginx accepts its configuration. An image whose program tools/cluster/build.sh has not
    built yet is skipped, with build.sh's command (images.sh build would stop on it)."""
    waiting = [
        line
        for line in images_sh("missing", timeout=60).stdout.splitlines()
        if line.startswith(f"{name}: ")
    ]
    if waiting:
        pytest.skip(waiting[0])
    before = leftovers()
    result = images_sh("build", name, timeout=1500)
    assert result.returncode == 0, result.stderr
    result = images_sh("check", name)
    assert result.returncode == 0, result.stderr
    stored = name if "/" in name else f"docker.io/library/{name}"
    assert f"imported as {stored}" in result.stderr
    tag = name.rsplit(":", 1)[1]
    if "/sig-storage/" in name or "/agnhost:" in name:
        assert result.stderr.rstrip().endswith(tag), result.stderr
    assert leftovers() == before


def test_a_command_replaces_the_entrypoint() -> None:
    """`check NAME --command ...` runs as a pod's `command`; plain ARGs as its `args`."""
    name = "registry.k8s.io/e2e-test-images/nginx:1.14-4"
    build(name)
    as_args = images_sh("check", name, "nginx", "-v")
    assert as_args.returncode == 0, as_args.stderr
    assert "nginx version: nginx/" in as_args.stderr
    as_command = images_sh("check", name, "--command", "sh", "-c", "echo $((6 * 7))")
    assert as_command.returncode == 0, as_command.stderr
    assert as_command.stdout == "42\n"
