"""tools/cluster/build.sh and its pins, without the network or a Go toolchain.

The pins live once in tools/cluster/versions.env, with versions-1.MM.env over it for another
Kubernetes minor (KUBERNETES_VERSION selects it, tools/cluster/pins.sh); each component's go.mod
(go/COMPONENT-1.MM where that minor has its own) must require the same version, or the cache
directory named by the pin would hold another version's binaries. An unknown minor is refused. A
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
# The minors with pins: versions.env's own (None) and each versions-1.MM.env's.
MINORS: list[str | None] = [
    None,
    *sorted(p.name[len("versions-") : -len(".env")] for p in CLUSTER.glob("versions-1.*.env")),
]
# What a minor's file may change: the pins that follow Kubernetes.
KUBERNETES_COUPLED = {
    "KUBERNETES_VERSION",
    "KUBERNETES_STAGING_VERSION",
    "AGNHOST_VERSION",
    "GINKGO_VERSION",
    "ETCD_VERSION",
    "COREDNS_VERSION",
}


def _read_pins(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((CLUSTER / name).read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN_LINE.match(line)
        assert match, f"{name}:{number}: not a plain NAME=VALUE line: {line!r}"
        assert match.group(1) not in pins, f"{name}:{number}: {match.group(1)} twice"
        pins[match.group(1)] = match.group(2)
    return pins


def _pins(minor: str | None = None) -> dict[str, str]:
    """versions.env, with a minor's own file over it."""
    pins = _read_pins("versions.env")
    return pins if minor is None else {**pins, **_read_pins(f"versions-{minor}.env")}


def _minor_env(minor: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_VERSION"}
    return env if minor is None else {**env, "KUBERNETES_VERSION": f"v{minor}"}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *args],
        check=False,
        capture_output=True,
        text=True,
        env=_minor_env(None) if env is None else env,
        timeout=60,
    )


def _programs(minor: str | None = None) -> list[tuple[str, str, str, str]]:
    """(name, component, version, package) of each program, as `build.sh list` prints them."""
    out = _run("list", env=_minor_env(minor))
    assert out.returncode == 0, out.stderr
    rows = [tuple(line.split()) for line in out.stdout.splitlines()]
    assert rows and all(len(row) == 4 for row in rows), out.stdout
    return rows  # type: ignore[return-value]


def _moddir(component: str, minor: str | None = None) -> Path:
    """The module directory build.sh builds a component in at that minor."""
    own = CLUSTER / "go" / f"{component}-{minor}"
    return own if minor is not None and own.is_dir() else CLUSTER / "go" / component


def _go_mod(component: str, minor: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The required and the replacement versions of a component's go.mod, by module path."""
    text = (_moddir(component, minor) / "go.mod").read_text()
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


@pytest.mark.parametrize("minor", MINORS)
def test_versions_env_is_plain_name_value_lines(minor: str | None) -> None:
    pins = _pins(minor)
    for name, value in pins.items():
        if name.endswith("_VERSION") and name != "AGNHOST_VERSION":
            assert re.fullmatch(r"v\d+\.\d+\.\d+", value), f"{name}={value} is not vX.Y.Z"
    kube = pins["KUBERNETES_VERSION"].split(".")
    staging = pins["KUBERNETES_STAGING_VERSION"].split(".")
    assert staging[0] == "v0" and staging[1:] == kube[1:], "staging is v0.<minor>.<patch>"
    if minor is not None:
        assert kube[1] == minor.split(".")[1], f"versions-{minor}.env pins {kube}"
        own = set(_read_pins(f"versions-{minor}.env"))
        assert own <= KUBERNETES_COUPLED, f"versions-{minor}.env: {own - KUBERNETES_COUPLED}"


def test_a_minors_module_directories_are_its_changed_components() -> None:
    # A go/COMPONENT-1.MM directory without a pin of that minor's file behind it would build the
    # default's version into a directory named for another (or never be used at all).
    default = {component: version for _, component, version, _ in _programs()}
    dirs = sorted((CLUSTER / "go").glob("*-1.*"))
    assert dirs, "no module directory of another minor"
    for path in dirs:
        component, minor = path.name.rsplit("-", 1)
        assert component in default, f"{path.name}: no component {component}"
        assert minor in MINORS, f"{path.name}: no versions-{minor}.env"
        theirs = {component: version for _, component, version, _ in _programs(minor)}
        assert theirs[component] != default[component], f"{path.name}: the default's version"


@pytest.mark.parametrize("minor", MINORS)
def test_each_go_mod_requires_the_pinned_version(minor: str | None) -> None:
    for _name, component, version, package in _programs(minor):
        required, replaced = _go_mod(component, minor)
        own = _own_program(component, package)
        if own is not None:
            assert "package main" in (own / "main.go").read_text(), f"{package}: no main package"
            continue
        module = _module_of(package.split(":")[0], required)
        if ":" in package:  # MODULE:SUBDIR, a directory of YAML files
            continue  # a CRD module is required at whatever version the component's module uses
        assert required[module] == version, f"{component}/go.mod: {module} {required[module]}"
        assert replaced.get(module, version) == version, f"{component}/go.mod replaces {module}"
        assert (_moddir(component, minor) / "go.sum").is_file(), f"{component}: no go.sum"


@pytest.mark.parametrize("minor", MINORS)
def test_each_program_is_imported_by_its_tools_go(minor: str | None) -> None:
    # go mod tidy keeps go.sum complete only for the packages tools.go imports.
    for _name, component, _, package in _programs(minor):
        if ":" in package or _own_program(component, package) is not None:
            continue  # a package of the module itself needs no import to be tidied
        tools = (_moddir(component, minor) / "tools.go").read_text()
        assert f'_ "{package}"' in tools, f"{component}/tools.go does not import {package}"


@pytest.mark.parametrize("minor", MINORS)
def test_kubernetes_staging_modules_are_its_release(minor: str | None) -> None:
    pins = _pins(minor)
    _, replaced = _go_mod("kubernetes", minor)
    staging = {m: v for m, v in replaced.items() if m.startswith("k8s.io/")}
    assert len(staging) > 20, "k8s.io/kubernetes needs each staging module replaced"
    wrong = {m: v for m, v in staging.items() if v != pins["KUBERNETES_STAGING_VERSION"]}
    assert not wrong, f"staging modules not at the pin: {wrong}"


@pytest.mark.parametrize("minor", MINORS)
def test_ginkgo_is_the_release_e2e_test_is_built_with(minor: str | None) -> None:
    # ginkgo -p runs e2e.test as its workers; a CLI of another release than the library inside
    # the binary warns at every run, and their parallel protocol may differ.
    required, _ = _go_mod("kubernetes", minor)
    assert _pins(minor)["GINKGO_VERSION"] == required["github.com/onsi/ginkgo/v2"]


def test_kubernetes_version_selects_a_minors_pins(tmp_path: Path) -> None:
    env = {**_minor_env(None), "CSI_HOSTPATH_CACHE": str(tmp_path)}
    for minor in MINORS[1:]:
        assert minor is not None
        pins = _pins(minor)
        for asked in (pins["KUBERNETES_VERSION"], f"v{minor}", minor):
            out = _run("path", "kubelet", env={**env, "KUBERNETES_VERSION": asked})
            kube = pins["KUBERNETES_VERSION"]
            assert out.stdout.strip() == f"{tmp_path}/kubernetes-{kube}/kubelet", out.stderr
        out = _run("path", "ginkgo", env={**env, "KUBERNETES_VERSION": f"v{minor}"})
        assert out.stdout.strip() == f"{tmp_path}/ginkgo-{pins['GINKGO_VERSION']}/ginkgo"


def test_an_unknown_minor_or_release_is_refused_naming_the_supported_ones() -> None:
    supported = [_pins(m)["KUBERNETES_VERSION"] for m in MINORS]
    assert len(supported) >= 2, supported
    wrong_patch = supported[1].rsplit(".", 1)[0] + ".999"
    for asked in ("v1.99.0", "v1.99", wrong_patch, "latest"):
        out = _run("path", "kubelet", env={**_minor_env(None), "KUBERNETES_VERSION": asked})
        assert out.returncode == 2 and out.stdout == "", (asked, out.stdout)
        assert f"KUBERNETES_VERSION={asked}: " in out.stderr, out.stderr
        assert all(v in out.stderr for v in supported), out.stderr


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


@pytest.mark.parametrize("minor", MINORS)
def test_each_built_program_reports_its_pin(minor: str | None) -> None:
    # The version ldflags: a program built without them says v0.0.0 or "unknown", and helm's
    # kubeVersion checks and the e2e suite's version gates then go wrong. Programs not built on
    # this machine are left out (building needs the network).
    pins = _pins(minor)
    out = _run("versions", "everything", env=_minor_env(minor))
    assert out.returncode == 0, out.stderr
    built = [line.split(" ", 1) for line in out.stdout.splitlines() if "(not built)" not in line]
    if not built:
        pytest.skip("nothing is built here yet: tools/cluster/build.sh kind")
    versions = {name: version for name, _, version, _ in _programs(minor)}
    for name, said in built:
        if name.endswith(("-crds", "-manifests")):
            assert not said.startswith("0 "), f"{name}: {said}"
            continue
        want = pins["AGNHOST_VERSION"] if name == "agnhost" else versions[name].lstrip("v")
        assert want in said, f"{name} reports {said!r}, its pin is {want}"
