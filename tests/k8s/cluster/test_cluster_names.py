"""Clusters side by side (CLUSTER_NAME), checked offline: no root, no cluster, no network.

The default cluster keeps the names, addresses and ports it had before clusters had names (the
values below are those of the scripts then); another name derives its own, and nothing a cluster
makes on the host (directory, link, cgroup, iptables tag, address, port, pod range) is another's.
The clusters' roots are made under a temporary CLUSTER_BASE here, with settings files as up.sh
records them, so the slot allocation and the guards run as they do on the machine. The real
second cluster is tests/k8s/cluster/test_cluster_side_by_side.py.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "tools" / "cluster"

# The default cluster's values before clusters had names (tools/cluster/lib.sh, node.sh, up.sh,
# the templates, at the commit before CLUSTER_NAME).
TODAY = {
    "CLUSTER_ROOT": "/var/lib/csi-hostpath-cluster",
    "CLUSTER_RUN": f"{ROOT}/.run/cluster",
    "KUBECONFIG": f"{ROOT}/.run/cluster/kubeconfig",
    "CLUSTER_NAME": "csi-hostpath",
    "CLUSTER_TAG": "csi-hostpath-cluster",
    "CLUSTER_CGROUP": "/csi-hostpath-cluster",
    "CLUSTER_BRIDGE": "chp-br0",
    "CLUSTER_NET_PREFIX": "10.250.0",
    "CLUSTER_HOST_IP": "10.250.0.1",
    "CLUSTER_POD_CIDR": "10.244.0.0/16",
    "CLUSTER_POD_PREFIX": "10.244",
    "CLUSTER_SERVICE_CIDR": "10.96.0.0/12",
    "CLUSTER_SERVICE_IP": "10.96.0.1",
    "CLUSTER_API_PORT": "6443",
    "CLUSTER_ETCD_PORT": "12379",
    "CLUSTER_ETCD_PEER_PORT": "12380",
    "CLUSTER_CONTROLLER_MANAGER_PORT": "10257",
    "CLUSTER_SCHEDULER_PORT": "10259",
    "CLUSTER_KUBELET_PORT": "10250",
    "CLUSTER_KUBELET_HEALTHZ_PORT": "10248",
    "CLUSTER_PROXY_HEALTHZ_PORT": "10256",
    "CLUSTER_PROXY_METRICS_PORT": "10249",
    "NODE_1_NAME": "csi-hostpath-worker",
    "NODE_1_IP": "10.250.0.11",
    "NODE_1_VETH": "chp-v1",
    "NODE_1_POD_CIDR": "10.244.1.0/24",
    "NODE_1_CGROUP": "/csi-hostpath-cluster/csi-hostpath-worker",
    "NODE_1_DIR": "/var/lib/csi-hostpath-cluster/nodes/csi-hostpath-worker",
    "NODE_2_NAME": "csi-hostpath-worker2",
    "NODE_2_IP": "10.250.0.12",
    "NODE_2_VETH": "chp-v2",
    "NODE_2_POD_CIDR": "10.244.2.0/24",
    "NODE_2_CGROUP": "/csi-hostpath-cluster/csi-hostpath-worker2",
    "NODE_2_DIR": "/var/lib/csi-hostpath-cluster/nodes/csi-hostpath-worker2",
}
# What a cluster holds on the host alone: no two clusters may share one of these.
HOST_PORTS = (
    "CLUSTER_API_PORT",
    "CLUSTER_ETCD_PORT",
    "CLUSTER_ETCD_PEER_PORT",
    "CLUSTER_CONTROLLER_MANAGER_PORT",
    "CLUSTER_SCHEDULER_PORT",
)
NODE_PORTS = (
    "CLUSTER_KUBELET_PORT",
    "CLUSTER_KUBELET_HEALTHZ_PORT",
    "CLUSTER_PROXY_HEALTHZ_PORT",
    "CLUSTER_PROXY_METRICS_PORT",
)
OWN = (
    "CLUSTER_ROOT",
    "CLUSTER_RUN",
    "KUBECONFIG",
    "CLUSTER_NAME",
    "CLUSTER_TAG",
    "CLUSTER_CGROUP",
    "CLUSTER_BRIDGE",
    "CLUSTER_HOST_IP",
    "NODE_1_NAME",
    "NODE_2_NAME",
    "NODE_1_IP",
    "NODE_2_IP",
    "NODE_1_VETH",
    "NODE_2_VETH",
    "NODE_1_CGROUP",
    "NODE_2_CGROUP",
    "NODE_1_DIR",
    "NODE_2_DIR",
    *HOST_PORTS,
)


def _env(**settings: str) -> dict[str, str]:
    """The caller's environment without any cluster setting of its own, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_")}
    return {**env, **settings}


def _bash(script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER / script), *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _lib(code: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run `code` in a bash that sourced lib.sh."""
    return subprocess.run(
        ["bash", "-c", f'. "{CLUSTER}/lib.sh" && {code}'],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


def _settings(env: dict[str, str]) -> dict[str, str]:
    result = _bash("up.sh", "--settings", env=env)
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.splitlines())


def _record(base: Path, settings: dict[str, str], *, slot: bool = True) -> None:
    """Write `settings` where up.sh records a cluster's, as if that cluster were up. slot=False
    writes the file as the scripts did before slots (the default cluster of an older checkout)."""
    state = Path(settings["CLUSTER_ROOT"]) / "state"
    assert state.is_relative_to(base)
    state.mkdir(parents=True)
    lines = [
        f"{k}={v}"
        for k, v in settings.items()
        if k.startswith("CLUSTER_") and (slot or k not in ("CLUSTER_SLOT", "CLUSTER_TAG"))
    ]
    (state / "settings.env").write_text("\n".join(lines) + "\n")


def _networks(settings: dict[str, str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [
        ipaddress.ip_network(settings["CLUSTER_NET_PREFIX"] + ".0/24"),
        ipaddress.ip_network(settings["CLUSTER_POD_CIDR"]),
    ]


def _assert_apart(a: dict[str, str], b: dict[str, str]) -> None:
    for key in OWN:
        assert a[key] != b[key], key
    assert not {a[k] for k in HOST_PORTS} & {b[k] for k in HOST_PORTS}
    for net_a in _networks(a):
        for net_b in _networks(b):
            assert not net_a.overlaps(net_b), (net_a, net_b)
    # The in-node ports are the same everywhere, at addresses of each cluster's own.
    sockets_a = {(a[f"NODE_{i}_IP"], a[p]) for i in (1, 2) for p in NODE_PORTS}
    sockets_b = {(b[f"NODE_{i}_IP"], b[p]) for i in (1, 2) for p in NODE_PORTS}
    assert not sockets_a & sockets_b
    # Neither's root, tag or cgroup starts with the other's: a teardown matching by prefix (an
    # older checkout's down.sh among them) would take the other's things.
    for key in ("CLUSTER_ROOT", "CLUSTER_TAG", "CLUSTER_CGROUP"):
        assert not a[key].startswith(b[key]) and not b[key].startswith(a[key]), key


def test_the_default_cluster_keeps_todays_names_addresses_and_ports(tmp_path: Path) -> None:
    # On the machine's own CLUSTER_BASE (where the default cluster may be up, from any checkout:
    # --settings then prints what it recorded), only the root is looked at.
    assert _settings(_env())["CLUSTER_ROOT"] == TODAY["CLUSTER_ROOT"]
    settings = {
        key: value.replace(str(tmp_path), "/var/lib")
        for key, value in _settings(_env(CLUSTER_BASE=str(tmp_path))).items()
    }
    for key, value in TODAY.items():
        assert settings[key] == value, key
    assert settings["CLUSTER_SLOT"] == "0"
    named = _settings(_env(CLUSTER_NAME="csi-hostpath", CLUSTER_BASE=str(tmp_path)))
    assert named == _settings(_env(CLUSTER_BASE=str(tmp_path)))


def test_the_default_cluster_renders_the_files_it_rendered(tmp_path: Path) -> None:
    assert _bash("render.sh", str(tmp_path / "a"), env=_env()).returncode == 0
    named = _env(CLUSTER_NAME="csi-hostpath")
    assert _bash("render.sh", str(tmp_path / "b"), env=named).returncode == 0
    for path in (tmp_path / "a").rglob("*.*"):
        other = tmp_path / "b" / path.relative_to(tmp_path / "a")
        assert other.read_text() == path.read_text().replace(
            str(tmp_path / "a"), str(tmp_path / "b")
        )
    kubelet = yaml.safe_load((tmp_path / "a/nodes/csi-hostpath-worker/kubelet.yaml").read_text())
    assert (kubelet["port"], kubelet["healthzPort"]) == (10250, 10248)
    assert kubelet["cgroupRoot"] == "/csi-hostpath-cluster/csi-hostpath-worker"
    proxy = yaml.safe_load((tmp_path / "a/nodes/csi-hostpath-worker/kube-proxy.yaml").read_text())
    assert proxy["healthzBindAddress"] == "127.0.0.1:10256"
    assert proxy["metricsBindAddress"] == "127.0.0.1:10249"


def test_two_clusters_up_side_by_side_share_nothing(tmp_path: Path) -> None:
    base = str(tmp_path)
    default = _settings(_env(CLUSTER_BASE=base))
    # The default cluster up, recorded as an older checkout did (no slot in its file).
    _record(tmp_path, default, slot=False)
    t2 = _settings(_env(CLUSTER_NAME="t2", CLUSTER_BASE=base))
    assert t2["CLUSTER_SLOT"] == "1"
    assert t2["CLUSTER_ROOT"] == f"{base}/chp-cluster-t2"
    assert t2["KUBECONFIG"] == f"{ROOT}/.run/t2/kubeconfig"
    assert (t2["CLUSTER_BRIDGE"], t2["NODE_1_VETH"], t2["NODE_2_VETH"]) == (
        "chp-t2-br",
        "chp-t2-v1",
        "chp-t2-v2",
    )
    assert (t2["CLUSTER_NET_PREFIX"], t2["CLUSTER_POD_CIDR"]) == ("10.250.1", "10.245.0.0/16")
    assert [t2[k] for k in HOST_PORTS] == ["12410", "12411", "12412", "12413", "12414"]
    _assert_apart(default, t2)
    _record(tmp_path, t2)
    # A third takes the next slot; each keeps its own once recorded.
    e2e = _settings(_env(CLUSTER_NAME="e2e", CLUSTER_BASE=base))
    assert e2e["CLUSTER_SLOT"] == "2"
    _assert_apart(default, e2e)
    _assert_apart(t2, e2e)
    assert _settings(_env(CLUSTER_NAME="t2", CLUSTER_BASE=base)) == t2


def test_every_slot_is_apart_from_every_other(tmp_path: Path) -> None:
    clusters = [_settings(_env(CLUSTER_BASE=str(tmp_path)))]
    for slot in range(1, 6):
        # The longest name there may be: its links still fit in 15 characters.
        name = f"s{slot}345678"
        clusters.append(
            _settings(_env(CLUSTER_NAME=name, CLUSTER_SLOT=str(slot), CLUSTER_BASE=str(tmp_path)))
        )
    for i, a in enumerate(clusters):
        assert max(len(a[k]) for k in ("CLUSTER_BRIDGE", "NODE_1_VETH", "NODE_2_VETH")) <= 15
        for b in clusters[i + 1 :]:
            _assert_apart(a, b)
            # No address of one is in a network of the other (service range aside, see lib.sh).
            for net in _networks(b):
                assert ipaddress.ip_address(a["NODE_1_IP"]) not in net


def test_the_certificates_and_configs_of_a_named_cluster_are_its_own(tmp_path: Path) -> None:
    env = _env(CLUSTER_NAME="t2", CLUSTER_BASE=str(tmp_path))
    assert _bash("pki.sh", str(tmp_path / "pki"), env=env).returncode == 0
    node = yaml.safe_load((tmp_path / "pki/kubelet-t2-worker.kubeconfig").read_text())
    assert node["clusters"][0]["cluster"]["server"] == "https://10.250.1.1:12410"
    admin = yaml.safe_load((tmp_path / "pki/admin.kubeconfig").read_text())
    assert admin["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:12410"
    assert admin["current-context"] == "t2"
    san = subprocess.run(
        [
            "openssl",
            "x509",
            "-in",
            str(tmp_path / "pki/apiserver.crt"),
            "-noout",
            "-ext",
            "subjectAltName",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "10.250.1.1" in san and "10.250.0.1" not in san
    assert _bash("render.sh", str(tmp_path), env=env).returncode == 0
    kubelet = yaml.safe_load((tmp_path / "nodes/t2-worker2/kubelet.yaml").read_text())
    assert kubelet["cgroupRoot"] == "/chp-cluster-t2/t2-worker2"
    assert kubelet["address"] == "10.250.1.12" and kubelet["port"] == 10250
    cni = json.loads((tmp_path / "nodes/t2-worker2/10-csi-hostpath.conflist").read_text())
    ipam = cni["plugins"][0]["ipam"]
    assert ipam["ranges"][0][0]["subnet"] == "10.245.2.0/24"
    assert {r["dst"] for r in ipam["routes"]} == {"10.245.0.0/16", "10.96.0.0/12", "10.250.1.0/24"}


def test_a_teardown_lists_only_its_own_cluster() -> None:
    default = _bash("down.sh", "--list", env=_env()).stdout
    t2 = _bash("down.sh", "--list", env=_env(CLUSTER_NAME="t2")).stdout
    assert "chp-br0" in default and "chp-t2" not in default and "t2-worker" not in default
    for theirs in ("csi-hostpath-cluster", "chp-br0", "chp-v1", "csi-hostpath-worker"):
        assert theirs not in t2


def test_a_teardown_matches_its_own_mounts_and_rules_only() -> None:
    lines = (
        "\n".join(
            [
                "/var/lib/chp-cluster-t2",
                "/var/lib/chp-cluster-t2/nodes/t2-worker/ns/net",
                "/var/lib/chp-cluster-t22/nodes/t22-worker/ns/net",
                "/var/lib/csi-hostpath-cluster/x",
                "-A FORWARD -i chp-t2-br -m comment --comment chp-cluster-t2 -j DROP",
                "-A FORWARD -i chp-t22-br -m comment --comment chp-cluster-t22 -j DROP",
                "-A FORWARD -i chp-br0 -m comment --comment csi-hostpath-cluster -j DROP",
            ]
        )
        + "\n"
    )
    env = _env(CLUSTER_NAME="t2")
    mounts = _lib("under_root", env, lines).stdout.splitlines()
    assert mounts == ["/var/lib/chp-cluster-t2", "/var/lib/chp-cluster-t2/nodes/t2-worker/ns/net"]
    rules = _lib("tagged", env, lines).stdout.splitlines()
    assert rules == ["-A FORWARD -i chp-t2-br -m comment --comment chp-cluster-t2 -j DROP"]
    rules = _lib("tagged", _env(), lines).stdout.splitlines()
    assert rules == ["-A FORWARD -i chp-br0 -m comment --comment csi-hostpath-cluster -j DROP"]


def test_a_second_cluster_of_one_name_is_refused_another_name_is_not(tmp_path: Path) -> None:
    base = str(tmp_path)
    t2 = _settings(_env(CLUSTER_NAME="t2", CLUSTER_BASE=base))
    _record(tmp_path, {**t2, "CLUSTER_RUN": "/elsewhere/.run/t2"})
    refused = _lib("claim_name", _env(CLUSTER_NAME="t2", CLUSTER_BASE=base))
    assert refused.returncode == 1
    assert "'t2' of /elsewhere/.run/t2 is up" in refused.stderr
    assert "make cluster-down CLUSTER_NAME=t2" in refused.stderr
    assert _lib("claim_name && claim_slot", _env(CLUSTER_BASE=base)).returncode == 0
    other = _lib(
        "claim_name && claim_slot && echo $CLUSTER_SLOT", _env(CLUSTER_NAME="t3", CLUSTER_BASE=base)
    )
    assert other.returncode == 0 and other.stdout.strip() == "2"
    # A slot asked for by number is refused while another cluster holds it.
    taken = _lib("claim_slot", _env(CLUSTER_NAME="t3", CLUSTER_SLOT="1", CLUSTER_BASE=base))
    assert taken.returncode == 1 and "slot 1" in taken.stderr and "'t2'" in taken.stderr


def test_no_slot_left_is_refused(tmp_path: Path) -> None:
    for slot in range(1, 6):
        _record(
            tmp_path,
            _settings(
                _env(CLUSTER_NAME=f"n{slot}", CLUSTER_SLOT=str(slot), CLUSTER_BASE=str(tmp_path))
            ),
        )
    full = _lib("claim_slot", _env(CLUSTER_NAME="late", CLUSTER_BASE=str(tmp_path)))
    assert full.returncode == 1 and "every slot" in full.stderr and "n3" in full.stderr


@pytest.mark.parametrize("name", ["T2", "2t", "with-dash", "toolongname", "cluster", "state"])
def test_a_name_that_fits_no_link_or_directory_is_refused(name: str) -> None:
    result = _bash("up.sh", "--settings", env=_env(CLUSTER_NAME=name))
    assert result.returncode == 1 and f"CLUSTER_NAME '{name}'" in result.stderr
