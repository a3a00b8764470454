"""The cluster from binaries (tools/cluster/), checked offline: no root, no cluster, no network.

The configuration templates render for every node into files the components accept (parsed
here as YAML, TOML and JSON, with the settings the host needs: cgroup v1 allowed, cgroupfs, a
cgroup root per node, x509 and webhook auth, no default route for pods, the sandbox image the
e2e suite names); the certificates carry the names the API server's authorizers read; the pause
image archive names itself for `ctr images import`; and down.sh lists every kind of thing it
cleans. The real cluster is tests/k8s/cluster/test_cluster_real.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "tools" / "cluster"
NODES = ("csi-hostpath-worker", "csi-hostpath-worker2")
# The e2e suite's sandbox image, where its manifest names it (test/utils/image/manifest.go).
E2E_MANIFEST = Path("/root/go/pkg/mod/k8s.io/kubernetes@v1.35.4/test/utils/image/manifest.go")


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["bash", str(CLUSTER / script), *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    assert result.returncode == 0, f"{script} {args}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render")
    _run("render.sh", str(out))
    return out


def _yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    "script", ["up.sh", "down.sh", "node.sh", "pki.sh", "pause.sh", "render.sh"]
)
def test_every_script_explains_itself(script: str) -> None:
    out = _run(script, "--help")
    assert f"tools/cluster/{script}" in out


def test_no_template_variable_is_left_unrendered(rendered: Path) -> None:
    files = list(rendered.rglob("*.*"))
    assert len(files) == 1 + 4 * len(NODES)
    for path in files:
        assert not re.search(r"\$\{[A-Z_]+\}", path.read_text()), path


def test_kubelets_run_on_this_host_and_authenticate_their_callers(rendered: Path) -> None:
    roots = set()
    for node in NODES:
        config = _yaml(rendered / "nodes" / node / "kubelet.yaml")
        assert config["kind"] == "KubeletConfiguration"
        assert config["failCgroupV1"] is False  # cgroup v1 host: the 1.35 kubelet refuses it else
        assert config["cgroupDriver"] == "cgroupfs"
        roots.add(config["cgroupRoot"])
        assert config["authentication"]["anonymous"]["enabled"] is False
        assert config["authentication"]["webhook"]["enabled"] is True
        assert config["authentication"]["x509"]["clientCAFile"] == str(rendered / "pki/ca.crt")
        assert config["authorization"]["mode"] == "Webhook"
        assert config["registerNode"] is True
        assert config["readOnlyPort"] == 0
        # The pods' resolver file is the node's own, never the host's.
        assert config["resolvConf"] == str(rendered / "nodes" / node / "resolv.conf")
        # No registry can give back an image the garbage collector removed.
        assert config["imageGCHighThresholdPercent"] == 100
    assert len(roots) == len(NODES), "each kubelet needs a cgroup root of its own"


def test_containerd_has_the_sandbox_image_and_cannot_lower_oom_scores(rendered: Path) -> None:
    for node in NODES:
        config = tomllib.loads((rendered / "nodes" / node / "containerd.toml").read_text())
        cri = config["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.1"
        assert cri["restrict_oom_score_adj"] is True
        runc = cri["containerd"]["runtimes"]["runc"]
        assert runc["options"]["SystemdCgroup"] is False
        assert cri["cni"]["conf_dir"] == "/etc/cni/net.d"
        assert config["root"] == "/var/lib/containerd"
        assert config["grpc"]["address"] == "/run/containerd/containerd.sock"


@pytest.mark.skipif(not E2E_MANIFEST.exists(), reason="no k8s.io/kubernetes v1.35.4 module here")
def test_the_sandbox_image_is_the_one_the_e2e_suite_names() -> None:
    match = re.search(
        r'configs\[Pause\] = Config\{list\.GcRegistry, "pause", "([^"]+)"\}',
        E2E_MANIFEST.read_text(),
    )
    assert match and match.group(1) == "3.10.1"


def test_pods_get_a_cidr_per_node_and_no_route_out(rendered: Path) -> None:
    subnets = set()
    for node in NODES:
        conflist = json.loads((rendered / "nodes" / node / "10-csi-hostpath.conflist").read_text())
        bridge = conflist["plugins"][0]
        assert bridge["type"] == "bridge"
        assert bridge["isDefaultGateway"] is False and bridge["ipMasq"] is False
        ipam = bridge["ipam"]
        subnets.add(ipam["ranges"][0][0]["subnet"])
        destinations = [route["dst"] for route in ipam["routes"]]
        assert "0.0.0.0/0" not in destinations
        assert "10.96.0.0/12" in destinations  # the service range, kube-proxy's
    assert len(subnets) == len(NODES)


def test_kube_proxy_runs_iptables_for_its_node(rendered: Path) -> None:
    for node in NODES:
        config = _yaml(rendered / "nodes" / node / "kube-proxy.yaml")
        assert config["mode"] == "iptables"
        assert config["hostnameOverride"] == node
        kubeconfig = config["clientConnection"]["kubeconfig"]
        assert kubeconfig == str(rendered / "pki/kube-proxy.kubeconfig")


def _subject(cert: Path) -> str:
    return subprocess.run(
        [
            "openssl",
            "x509",
            "-in",
            str(cert),
            "-noout",
            "-nameopt",
            "RFC2253",
            "-subject",
            "-ext",
            "subjectAltName",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_certificates_name_what_the_authorizers_read(tmp_path: Path) -> None:
    _run("pki.sh", str(tmp_path))
    apiserver = _subject(tmp_path / "apiserver.crt")
    for name in ("127.0.0.1", "10.250.0.1", "10.96.0.1", "kubernetes.default.svc"):
        assert name in apiserver
    assert "O=system:masters" in _subject(tmp_path / "admin.crt")
    assert "CN=system:kube-proxy" in _subject(tmp_path / "kube-proxy.crt")
    for node in NODES:
        kubelet = _subject(tmp_path / f"kubelet-{node}.crt")
        assert f"CN=system:node:{node}" in kubelet and "O=system:nodes" in kubelet
        assert node in _subject(tmp_path / f"kubelet-{node}-serving.crt")
        config = _yaml(tmp_path / f"kubelet-{node}.kubeconfig")
        assert config["clusters"][0]["cluster"]["server"] == "https://10.250.0.1:6443"
    admin = _yaml(tmp_path / "admin.kubeconfig")
    assert admin["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    for key in tmp_path.glob("*.key"):
        assert key.stat().st_mode & 0o077 == 0, key


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_pause_image_names_itself_for_ctr_import(tmp_path: Path) -> None:
    env = {"CSI_HOSTPATH_CACHE": str(tmp_path)}
    _run("pause.sh", "build", env=env)
    name, archive = _run("pause.sh", "list", env=env).split()
    assert name == "registry.k8s.io/pause:3.10.1"
    with tarfile.open(archive) as tar:
        index_file = tar.extractfile("./index.json")
        assert index_file is not None
        index = json.load(index_file)
        [manifest] = index["manifests"]
        assert manifest["annotations"]["io.containerd.image.name"] == name
        names = tar.getnames()
    assert "./oci-layout" in names
    assert f"./blobs/sha256/{manifest['digest'].split(':')[1]}" in names
    program = _run("pause.sh", "path", "bin", env=env).strip()
    version = subprocess.run([program, "-v"], check=True, capture_output=True, text=True)
    assert "pause" in version.stdout


def test_down_lists_everything_it_cleans() -> None:
    listing = _run("down.sh", "--list")
    for kind in (
        "processes:",
        "mounts:",
        "loop devices:",
        "network namespace:",
        "mount namespace:",
        "veth:",
        "bridge:",
        "iptables rules:",
        "cgroups:",
        "directories:",
    ):
        assert kind in listing, kind
    for node in NODES:
        assert node in listing
