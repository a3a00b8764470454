"""tools/cluster/build.sh and its pins, without the network or a Go toolchain.

The pins live once in tools/cluster/versions.env; each component's own go.mod must require the
same version, or the cache directory named by the pin would hold another version's binaries. A
cache that has every program must build nothing (a warm run takes seconds), a `.partial`
directory must never count as built, and a failed go command must be named with its component.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "tools" / "cluster"
BUILD = CLUSTER / "build.sh"
PIN_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=([^\s'\"$`\\]+)$")


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((CLUSTER / "versions.env").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN_LINE.match(line)
        assert match, f"versions.env:{number}: not a plain NAME=VALUE line: {line!r}"
        assert match.group(1) not in pins, f"versions.env:{number}: {match.group(1)} twice"
        pins[match.group(1)] = match.group(2)
    return pins


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _programs() -> list[tuple[str, str, str, str]]:
    """(name, component, version, package) of each program, as `build.sh list` prints them."""
    out = _run("list")
    assert out.returncode == 0, out.stderr
    rows = [tuple(line.split()) for line in out.stdout.splitlines()]
    assert rows and all(len(row) == 4 for row in rows), out.stdout
    return rows  # type: ignore[return-value]


def _go_mod(component: str) -> tuple[dict[str, str], dict[str, str]]:
    """The required and the replacement versions of a component's go.mod, by module path."""
    text = (CLUSTER / "go" / component / "go.mod").read_text()
    required: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for block in re.findall(r"^require \((.*?)^\)", text, re.S | re.M):
        for line in block.splitlines():
            parts = line.split("//")[0].split()
            if len(parts) == 2:
                required[parts[0]] = parts[1]
    for module, version in re.findall(r"^require (\S+) (\S+)$", text, re.M):
        required[module] = version
    for block in re.findall(r"^replace \((.*?)^\)", text, re.S | re.M):
        for line in block.splitlines():
            parts = line.split("//")[0].split()
            if len(parts) == 4 and parts[1] == "=>":
                replaced[parts[0]] = parts[3]
    return required, replaced


def _own_program(component: str, package: str) -> Path | None:
    """The directory of a program the project writes itself inside the component's own module
    (a client over the pinned module's library), or None for a program of the pinned module."""
    prefix = f"csi-hostpath.local/{component}-build/"
    if not package.startswith(prefix):
        return None
    return CLUSTER / "go" / component / package[len(prefix) :]


def _module_of(package: str, required: dict[str, str]) -> str:
    owners = [m for m in required if package == m or package.startswith(m + "/")]
    assert owners, f"no required module provides {package}"
    return max(owners, key=len)


def test_versions_env_is_plain_name_value_lines() -> None:
    pins = _pins()
    for name, value in pins.items():
        if name.endswith("_VERSION") and name != "AGNHOST_VERSION":
            assert re.fullmatch(r"v\d+\.\d+\.\d+", value), f"{name}={value} is not vX.Y.Z"
    kube = pins["KUBERNETES_VERSION"].split(".")
    staging = pins["KUBERNETES_STAGING_VERSION"].split(".")
    assert staging[0] == "v0" and staging[1:] == kube[1:], "staging is v0.<minor>.<patch>"


def test_each_go_mod_requires_the_pinned_version() -> None:
    for _name, component, version, package in _programs():
        required, replaced = _go_mod(component)
        own = _own_program(component, package)
        if own is not None:
            assert "package main" in (own / "main.go").read_text(), f"{package}: no main package"
            continue
        module = _module_of(package.split(":")[0], required)
        if ":" in package:  # MODULE:SUBDIR, a directory of YAML files
            continue  # a CRD module is required at whatever version the component's module uses
        assert required[module] == version, f"{component}/go.mod: {module} {required[module]}"
        assert replaced.get(module, version) == version, f"{component}/go.mod replaces {module}"
        assert (CLUSTER / "go" / component / "go.sum").is_file(), f"{component}: no go.sum"


def test_each_program_is_imported_by_its_tools_go() -> None:
    # go mod tidy keeps go.sum complete only for the packages tools.go imports.
    for _name, component, _, package in _programs():
        if ":" in package or _own_program(component, package) is not None:
            continue  # a package of the module itself needs no import to be tidied
        tools = (CLUSTER / "go" / component / "tools.go").read_text()
        assert f'_ "{package}"' in tools, f"{component}/tools.go does not import {package}"


def test_kubernetes_staging_modules_are_its_release() -> None:
    pins = _pins()
    _, replaced = _go_mod("kubernetes")
    staging = {m: v for m, v in replaced.items() if m.startswith("k8s.io/")}
    assert len(staging) > 20, "k8s.io/kubernetes needs each staging module replaced"
    wrong = {m: v for m, v in staging.items() if v != pins["KUBERNETES_STAGING_VERSION"]}
    assert not wrong, f"staging modules not at the pin: {wrong}"


def test_ginkgo_is_the_release_e2e_test_is_built_with() -> None:
    # ginkgo -p runs e2e.test as its workers; a CLI of another release than the library inside
    # the binary warns at every run, and their parallel protocol may differ.
    required, _ = _go_mod("kubernetes")
    assert _pins()["GINKGO_VERSION"] == required["github.com/onsi/ginkgo/v2"]


def test_help_names_the_interface() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for word in ("kind", "path NAME", "versions.env", ".partial"):
        assert word in out.stdout, word


def test_path_is_the_versioned_cache_directory(tmp_path: Path) -> None:
    env = {**os.environ, "CSI_HOSTPATH_CACHE": str(tmp_path)}
    pins = _pins()
    out = _run("path", "kubelet", env=env)
    assert out.stdout.strip() == f"{tmp_path}/kubernetes-{pins['KUBERNETES_VERSION']}/kubelet"
    for name, component, version, _ in _programs():
        out = _run("path", name, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{tmp_path}/{component}-{version}/{name}"


def test_unknown_name_fails_naming_the_known_ones() -> None:
    for args in (("path", "kubelett"), ("kubelett",)):
        out = _run(*args)
        assert out.returncode == 2
        assert "no program 'kubelett'" in out.stderr and "kubelet" in out.stderr
        assert out.stdout == ""


def _fill(cache: Path, names: list[str]) -> None:
    for name, component, version, package in _programs():
        if name not in names:
            continue
        path = cache / f"{component}-{version}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if ":" in package:  # MODULE:SUBDIR, a directory of YAML files
            path.mkdir()
            (path / "crd.yaml").write_text("kind: CustomResourceDefinition\n")
        else:
            path.write_text("#!/bin/sh\necho built\n")
            path.chmod(0o755)


def _all() -> list[str]:
    """The `kind` group: every program but the e2e suite's own (and etcdctl), in table order."""
    out = _run("list")
    return [
        line.split()[0]
        for line in out.stdout.splitlines()
        if line.split()[0] not in ("e2e.test", "ginkgo", "etcdctl")
    ]


def test_a_warm_cache_builds_nothing_and_needs_no_go(tmp_path: Path) -> None:
    _fill(tmp_path, _all())
    # No go on PATH: a present program must not even look for the toolchain.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CSI_HOSTPATH_CACHE": str(tmp_path)}
    out = _run("kind", env=env)
    assert out.returncode == 0, out.stderr
    printed = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert list(printed) == _all()
    for name, path in printed.items():
        assert Path(path).exists(), name
    assert "building" not in out.stderr


def test_a_partial_directory_is_not_built(tmp_path: Path) -> None:
    pins = _pins()
    partial = tmp_path / f"helm-{pins['HELM_VERSION']}.partial"
    partial.mkdir()
    (partial / "helm").write_text("#!/bin/sh\n")
    (partial / "helm").chmod(0o755)
    out = _run("versions", "helm", env={**os.environ, "CSI_HOSTPATH_CACHE": str(tmp_path)})
    assert out.stdout.strip() == "helm (not built)"


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs Debian's dpkg-query")
def test_a_failed_go_command_is_named_with_its_component(tmp_path: Path) -> None:
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", "ca-certificates"],
        check=False,
        capture_output=True,
        text=True,
    )
    if installed.stdout != "installed":
        pytest.skip("the build would install ca-certificates first")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "go").write_text("#!/bin/sh\necho 'go: no network here' >&2\nexit 1\n")
    (fake / "go").chmod(0o755)
    cache = tmp_path / "cache"
    _fill(cache, [n for n in _all() if n != "helm"])
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "CSI_HOSTPATH_CACHE": str(cache)}
    out = _run("kind", env=env)
    assert out.returncode == 1
    pins = _pins()
    failed = f"build.sh: helm {pins['HELM_VERSION']}: failed: (cd {CLUSTER}/go/helm && go build"
    assert failed in out.stderr
    assert "helm.sh/helm/v4/cmd/helm" in out.stderr
    assert "failed: helm" in out.stderr
    # The rest is still printed; the failed one is not, and nothing of it looks finished.
    printed = [line.split()[0] for line in out.stdout.splitlines()]
    assert "helm" not in printed and "kubelet" in printed
    assert not (cache / f"helm-{pins['HELM_VERSION']}").exists()


def test_each_built_program_reports_its_pin() -> None:
    # The version ldflags: a program built without them says v0.0.0 or "unknown", and helm's
    # kubeVersion checks and the e2e suite's version gates then go wrong. Programs not built on
    # this machine are left out (building needs the network).
    pins = _pins()
    out = _run("versions", "everything")
    assert out.returncode == 0, out.stderr
    built = [line.split(" ", 1) for line in out.stdout.splitlines() if "(not built)" not in line]
    if not built:
        pytest.skip("nothing is built here yet: tools/cluster/build.sh kind")
    versions = {name: version for name, _, version, _ in _programs()}
    for name, said in built:
        if name.endswith(("-crds", "-manifests")):
            assert not said.startswith("0 "), f"{name}: {said}"
            continue
        want = pins["AGNHOST_VERSION"] if name == "agnhost" else versions[name].lstrip("v")
        assert want in said, f"{name} reports {said!r}, its pin is {want}"
