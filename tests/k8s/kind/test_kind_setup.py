"""The kind setup: host paths, the image load, the snapshot install and the host's cgroups"""

from __future__ import annotations

import re

import yaml

from tests.chart import chart_tool
from tests.chart.chart_tool import ROOT

GUIDE = ROOT / "docs" / "kind.md"


def host_paths(obj: object) -> list[str]:
    """Every hostPath.path and kind extraMounts hostPath found anywhere in a document."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "hostPath" and isinstance(value, dict):
                found.append(str(value["path"]))
            elif key == "hostPath" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(host_paths(value))
    elif isinstance(obj, list):
        for item in obj:
            found.extend(host_paths(item))
    return found


def test_host_paths_are_never_under_tmp() -> None:
    """/tmp may be a tmpfs or cleaned at boot; the pool and the ledger must survive both."""
    rendered = chart_tool.render()
    chart = [p for o in rendered.objects for p in host_paths(o)]
    kind = host_paths(yaml.safe_load((ROOT / "examples" / "kind-config.yaml").read_text()))
    shared = re.search(
        r"^KIND_SHARED_DIR \?= (\S+)$", (ROOT / "mk" / "deploy.mk").read_text(), re.MULTILINE
    )
    assert shared
    for path in [*chart, *kind, shared.group(1)]:
        assert not path.startswith("/tmp"), path
    for path in [*(p for p in kind if p != "/dev"), shared.group(1)]:
        assert path.startswith("/var/lib/"), path
    assert "/tmp/" not in GUIDE.read_text()


def test_guide_loads_the_image_as_an_archive() -> None:
    """`kind load docker-image` fails on Docker Engine 29; the guide loads an archive and links
    the upstream report of that failure."""
    guide = GUIDE.read_text()
    assert "docker save" in guide and "kind load image-archive" in guide
    assert "kubernetes-sigs/kind#3795" in guide


def test_guide_installs_snapshot_crds_and_controller() -> None:
    guide = GUIDE.read_text()
    assert "client/config/crd?ref=v8.7.0" in guide
    assert "kube-system kustomize" in guide
    assert "deploy/kubernetes/snapshot-controller?ref=v8.7.0" in guide
    # The pinned release is the chart's snapshotter tag.
    values = chart_tool.render().values
    assert values["sidecars"]["snapshotter"]["image"]["tag"] == "v8.7.0"


def test_guide_warns_about_cgroup_v1() -> None:
    guide = GUIDE.read_text()
    assert "cgroup v1" in guide and "1.35" in guide and "cgroup2fs" in guide


def test_both_kind_configs_run_a_135_kubelet_on_cgroup_v1() -> None:
    """The kubelet of 1.35 refuses cgroup v1 unless failCgroupV1 is false: both configurations
    say so through kind's kubeadmConfigPatches. They differ only in the host's /dev."""
    configs = {
        name: yaml.safe_load((ROOT / "examples" / name).read_text())
        for name in ("kind-config.yaml", "kind-config-no-dev.yaml")
    }
    for name, config in configs.items():
        patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
        assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches, name
    project, plain = configs["kind-config.yaml"], configs["kind-config-no-dev.yaml"]
    assert [n["role"] for n in plain["nodes"]] == [n["role"] for n in project["nodes"]]
    for mine, theirs in zip(project["nodes"], plain["nodes"], strict=True):
        without_dev = [m for m in mine["extraMounts"] if m["hostPath"] != "/dev"]
        assert theirs["extraMounts"] == without_dev
        assert "/dev" not in host_paths(theirs)
