"""The chart's rendered objects, read as the tests need them: the driver's pods, their containers,
flags and mounts, and the helper images the chart pins by default."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from tests.chart.chart_tool import Rendered

Obj = dict[str, Any]

# The sidecar releases the chart pins by default, the registrar and the liveness probe among
# them; implementation: csi-hostpath runs those two from the driver's image instead
# (tests/chart/test_helper_defaults.py).
UPSTREAM_HELPER_IMAGES = {
    "liveness-probe": "registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
    "node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0",
}


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def controller_pod(r: Rendered) -> Obj:
    return pod_spec(r.one("StatefulSet"))


def node_pod(r: Rendered) -> Obj:
    return pod_spec(r.one("DaemonSet"))


def all_containers(r: Rendered) -> Iterator[tuple[str, Obj]]:
    for kind in ("StatefulSet", "DaemonSet", "Deployment", "Job", "Pod"):
        for workload in r.of_kind(kind):
            spec = workload["spec"] if kind == "Pod" else pod_spec(workload)
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                yield f"{kind}/{workload['metadata']['name']}/{c['name']}", c


def container(spec: Obj, name: str) -> Obj:
    found: list[Obj] = [c for c in spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}, found {len(found)}"
    return found[0]


def flag(c: Obj, name: str) -> str:
    """The value of `--name=value` in a container's args; the test fails if it is not there."""
    values: list[str] = [
        a.split("=", 1)[1] for a in c.get("args", []) if a.startswith(f"--{name}=")
    ]
    assert len(values) == 1, f"{c['name']}: expected one --{name}=..., args are {c.get('args')}"
    return values[0]


def host_path_at(spec: Obj, c: Obj, mount_path: str) -> str:
    """The host directory a container sees at mount_path (the test fails if it is no hostPath)."""
    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == mount_path]
    assert len(mounts) == 1, f"{c['name']}: nothing (or several things) mounted at {mount_path}"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[0]["name"])
    assert "hostPath" in volume, f"{c['name']}: {mount_path} is not a hostPath volume: {volume}"
    path: str = volume["hostPath"]["path"]
    return path


def mount_holding(c: Obj, path: str) -> Obj:
    """The volume mount under which `path` lies inside a container (the deepest one)."""
    holding = [
        m
        for m in c.get("volumeMounts", [])
        if posixpath.commonpath([m["mountPath"], path]) == m["mountPath"]
    ]
    assert holding, f"{c['name']}: {path} is on no volume"
    return max(holding, key=lambda m: len(m["mountPath"]))


def mounted_dir_of(spec: Obj, c: Obj, path: str) -> tuple[str, str]:
    """(mountPath, hostPath) of the hostPath mount that holds `path` inside the container."""
    mount_path: str = mount_holding(c, path)["mountPath"]
    return mount_path, host_path_at(spec, c, mount_path)


def socket_path(endpoint: str) -> str:
    assert endpoint.startswith("unix:///"), f"not an absolute unix endpoint: {endpoint}"
    return endpoint[len("unix://") :]
