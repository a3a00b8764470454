"""Inline ephemeral volumes are opt-in and capped; SELinux-enforcing nodes."""

from __future__ import annotations

from tests.chart.chart_objects import container, controller_pod, flag, node_pod
from tests.chart.chart_tool import Rendered
from tests.chart.conftest import Case, rendered_case

INLINE_ON = Case("inline-on", {"inline": {"enabled": True, "maxSize": 256 * 1024**2}})


def driver_args(r: Rendered) -> list[list[str]]:
    return [container(s, "csi-hostpath")["args"] for s in (controller_pod(r), node_pod(r))]


def test_inline_volumes_are_off_by_default(rendered: Rendered) -> None:
    """Any pod author could otherwise take node disk outside every quota."""
    if rendered.values["inline"]["enabled"]:
        return
    assert rendered.one("CSIDriver")["spec"]["volumeLifecycleModes"] == ["Persistent"]
    for args in driver_args(rendered):
        assert not any(a.startswith(("--allow-inline-volumes", "--max-inline-size")) for a in args)


def test_inline_volumes_when_enabled_are_capped() -> None:
    r = rendered_case(INLINE_ON)
    assert r.one("CSIDriver")["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
    node = container(node_pod(r), "csi-hostpath")
    assert "--allow-inline-volumes" in node["args"]
    assert flag(node, "max-inline-size") == str(256 * 1024**2)


def test_selinux_mount_and_socket_access(rendered: Rendered) -> None:
    """seLinuxMount: each volume is its own superblock, so `-o context=` is correct (CSIDriverSpec
    docs). The node pod's sidecars share the privileged driver's broad type (spc_t) so that they
    may connect to its socket in a host directory on an enforcing node."""
    se = rendered.values["seLinux"]
    assert rendered.one("CSIDriver")["spec"]["seLinuxMount"] is se["mount"]
    pod = node_pod(rendered)
    if se["nodePluginType"]:
        assert pod["securityContext"]["seLinuxOptions"] == {"type": se["nodePluginType"]}
    else:
        assert "seLinuxOptions" not in pod.get("securityContext", {})


def test_selinux_defaults() -> None:
    r = rendered_case(Case("defaults", {}))
    assert r.one("CSIDriver")["spec"]["seLinuxMount"] is True
    assert node_pod(r)["securityContext"]["seLinuxOptions"]["type"] == "spc_t"
    off = rendered_case(Case("selinux-off", {"seLinux": {"mount": False, "nodePluginType": ""}}))
    assert off.one("CSIDriver")["spec"]["seLinuxMount"] is False
    assert "securityContext" not in node_pod(off)


def test_inline_flags_are_the_clis_own() -> None:
    """The two flags the chart passes are the driver's (its node guards add them)."""
    import pytest

    from csi_hostpath.cli import build_parser

    parser = build_parser()
    probe = ["serve", "--endpoint", "unix:///x.sock", "--allow-inline-volumes"]
    if parser.parse_known_args(probe)[1]:
        pytest.skip("the driver has no --allow-inline-volumes yet (the guards change adds it)")
    args = container(node_pod(rendered_case(INLINE_ON)), "csi-hostpath")["args"]
    parsed = parser.parse_args([a.replace("$(NODE_ID)", "n1") for a in args])
    assert parsed.max_inline_size == 256 * 1024**2
