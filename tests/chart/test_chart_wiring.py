"""How the chart wires the driver's pods, under every value set: sockets, mounts, flags, ports.

One driver name everywhere, the registration path and the sidecars on the plugin's socket, the
kubelet directory and /dev and the host's cgroups seen by the node plugin, node IDs, the shared
pool, plain integers, metrics and liveness ports, and the notes."""

from __future__ import annotations

import posixpath
import re

from tests.chart.chart_objects import (
    container,
    controller_pod,
    flag,
    host_path_at,
    mount_holding,
    mounted_dir_of,
    node_pod,
    socket_path,
)
from tests.chart.chart_tool import Rendered


def test_driver_name_is_the_same_everywhere(rendered: Rendered) -> None:
    name = rendered.values["driverName"]
    assert rendered.one("CSIDriver")["metadata"]["name"] == name
    classes = rendered.of_kind("StorageClass")
    assert classes and {sc["provisioner"] for sc in classes} == {name}
    for spec in (controller_pod(rendered), node_pod(rendered)):
        assert flag(container(spec, "csi-hostpath"), "driver-name") == name
    for vsc in rendered.of_kind("VolumeSnapshotClass"):
        assert vsc["driver"] == name
    registration = flag(
        container(node_pod(rendered), "node-driver-registrar"), "kubelet-registration-path"
    )
    assert f"/plugins/{name}/" in registration
    assert f"topology.{name}/node" in rendered.notes


def test_registration_path_is_the_node_plugin_socket(rendered: Rendered) -> None:
    """The kubelet dials the registration path on the host; it must be the very file the node
    plugin listens on, seen through the hostPath volume behind the plugin's socket directory."""
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    registrar = container(spec, "node-driver-registrar")
    sock = socket_path(flag(driver, "endpoint"))
    mount_path, host_dir = mounted_dir_of(spec, driver, sock)
    on_host = posixpath.join(host_dir, posixpath.relpath(sock, mount_path))
    assert flag(registrar, "kubelet-registration-path") == on_host
    # The registrar reaches the same socket through the same host directory.
    reg_sock = flag(registrar, "csi-address")
    reg_mount, reg_host_dir = mounted_dir_of(spec, registrar, reg_sock)
    assert posixpath.join(reg_host_dir, posixpath.relpath(reg_sock, reg_mount)) == on_host
    kubelet_dir = rendered.values["node"]["kubeletDir"].rstrip("/")
    assert host_path_at(spec, registrar, "/registration") == f"{kubelet_dir}/plugins_registry"


def test_sidecars_dial_the_driver_socket(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        sock = socket_path(flag(driver, "endpoint"))
        # The same volume (an emptyDir in the controller, a hostPath on the nodes) holds it.
        volume = mount_holding(driver, sock)["name"]
        for c in spec["containers"]:
            if c["name"] == "csi-hostpath":
                continue
            assert flag(c, "csi-address") == sock, c["name"]
            assert mount_holding(c, sock)["name"] == volume, c["name"]


def test_kubelet_dir_is_mounted_bidirectional(rendered: Rendered) -> None:
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    kubelet_dir = rendered.values["node"]["kubeletDir"].rstrip("/")
    mounts = [m for m in driver["volumeMounts"] if m["mountPath"] == kubelet_dir]
    assert len(mounts) == 1, f"the kubelet dir {kubelet_dir} is not mounted at the same path"
    assert mounts[0].get("mountPropagation") == "Bidirectional"
    assert host_path_at(spec, driver, kubelet_dir) == kubelet_dir
    # Only the privileged driver may propagate mounts back to the host.
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m.get("mountPropagation") == "Bidirectional":
                assert c["securityContext"].get("privileged") is True, c["name"]


def test_node_plugin_is_privileged_and_sees_dev(rendered: Rendered) -> None:
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    assert driver["securityContext"]["privileged"] is True
    assert host_path_at(spec, driver, "/dev") == "/dev"
    assert flag(driver, "mode") == "node"


def test_node_plugin_sees_the_hosts_cgroups(rendered: Rendered) -> None:
    # A VolumeAttributesClass's limits go into the cgroups of the volume's pods. Without the host's
    # /sys/fs/cgroup the plugin saw only its own container's cgroup (cgroup v1) and put the limits
    # there, throttling nothing: seen in the real cluster (the experiments, experiment h).
    spec = node_pod(rendered)
    driver = container(spec, "csi-hostpath")
    assert host_path_at(spec, driver, "/sys/fs/cgroup") == "/sys/fs/cgroup"


def test_node_id_is_the_kubernetes_node_name(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        assert flag(driver, "node-id") == "$(NODE_ID)"
        env = {e["name"]: e for e in driver["env"]}
        assert env["NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_controller_and_nodes_share_the_pool(rendered: Rendered) -> None:
    pool = rendered.values["pool"]
    for spec, mode in ((controller_pod(rendered), "controller"), (node_pod(rendered), "node")):
        driver = container(spec, "csi-hostpath")
        assert flag(driver, "mode") == mode
        assert flag(driver, "pool-scope") == pool["scope"]
        assert flag(driver, "pool-dir") == pool["hostPath"]
        assert host_path_at(spec, driver, pool["hostPath"]) == pool["hostPath"]
    # Each role keeps its own state on a hostPath (the ledger survives a pod restart), and never
    # the same directory: the driver locks its state directory.
    ctrl = container(controller_pod(rendered), "csi-hostpath")
    node = container(node_pod(rendered), "csi-hostpath")
    ctrl_state = flag(ctrl, "state-dir")
    node_state = flag(node, "state-dir")
    assert host_path_at(controller_pod(rendered), ctrl, ctrl_state) == ctrl_state
    assert host_path_at(node_pod(rendered), node, node_state) == node_state
    assert ctrl_state != node_state
    assert pool["hostPath"] not in (ctrl_state, node_state)


def test_numbers_reach_the_driver_as_plain_integers(rendered: Rendered) -> None:
    """Helm holds numbers as float64; a large size must not render as 1.073741824e+10."""
    driver = container(controller_pod(rendered), "csi-hostpath")
    assert flag(driver, "max-volume-size") == str(rendered.values["driver"]["maxVolumeSize"])
    assert flag(driver, "max-volumes-per-node") == str(
        rendered.values["driver"]["maxVolumesPerNode"]
    )
    for name in ("heartbeat-interval", "fence-interval", "node-grace"):
        assert re.fullmatch(r"[0-9]+(\.[0-9]+)?", flag(driver, name)), name


def test_metrics_port_only_when_enabled(rendered: Rendered) -> None:
    metrics = rendered.values["metrics"]
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        ports = {p["name"]: p["containerPort"] for p in driver["ports"]}
        has_flag = any(a.startswith("--metrics-address=") for a in driver["args"])
        if metrics["enabled"]:
            assert ports["metrics"] == metrics["port"]
            assert flag(driver, "metrics-address") == f":{metrics['port']}"
        else:
            assert "metrics" not in ports
            assert not has_flag


def test_liveness_probes_reach_the_livenessprobe_sidecar(rendered: Rendered) -> None:
    for spec in (controller_pod(rendered), node_pod(rendered)):
        driver = container(spec, "csi-hostpath")
        ports = {p["name"]: p["containerPort"] for p in driver["ports"]}
        assert driver["livenessProbe"]["httpGet"]["port"] == "healthz"
        probe = container(spec, "liveness-probe")
        assert flag(probe, "http-endpoint") == f":{ports['healthz']}"


def test_notes_render(rendered: Rendered) -> None:
    notes = rendered.notes
    assert rendered.values["driverName"] in notes
    assert "ledger list" in notes
    assert rendered.values["controller"]["stateHostPath"] in notes
