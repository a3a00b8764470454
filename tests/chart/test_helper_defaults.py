"""The chart's default registrar and liveness probe: kubernetes-csi's images, upstream's flags.

What the chart's defaults give a user for the registrar and the liveness probe: kubernetes-csi's
images, which any cluster can pull, with upstream's flags only. The driver image's own
subcommands stay one value away (implementation: csi-hostpath), for clusters that can't pull
those images, and differ from them in nothing but the image and the leading subcommand."""

from __future__ import annotations

from typing import Any

from tests.chart.chart_objects import UPSTREAM_HELPER_IMAGES, controller_pod, node_pod
from tests.chart.conftest import Case, rendered_case
from tests.chart.test_kubelet_helpers import HELPERS, UPSTREAM_FLAGS

Obj = dict[str, Any]

DEFAULTS = Case("defaults", {})
PROJECT_HELPERS = Case(
    "project-helpers",
    {
        "sidecars": {
            "nodeDriverRegistrar": {"implementation": "csi-hostpath"},
            "livenessProbe": {"implementation": "csi-hostpath"},
        }
    },
)

# The args of the default render, flag by flag. Each is defined by the pinned release's own
# cmd/csi-node-driver-registrar/main.go (v2.17.0) or cmd/livenessprobe/main.go (v2.19.0); the
# deprecated ones (--health-port, --mode, --connection-timeout, --metrics-address) are not used.
REGISTRAR_ARGS = [
    "--csi-address=/csi/csi.sock",
    "--kubelet-registration-path=/var/lib/kubelet/plugins/loop.hostpath.csi.dev/csi.sock",
    "--plugin-registration-path=/registration",
    "--v=2",
    "--timeout=2s",
    "--http-endpoint=:9809",
]
NODE_PROBE_ARGS = ["--csi-address=/csi/csi.sock", "--http-endpoint=:9898", "--probe-timeout=4s"]
CONTROLLER_PROBE_ARGS = [
    "--csi-address=/csi/csi.sock",
    "--http-endpoint=:9808",
    "--probe-timeout=4s",
]
DEPRECATED = {"health-port", "mode", "connection-timeout", "metrics-address"}


def helpers_by_pod(case: Case) -> dict[tuple[str, str], Obj]:
    """(pod, container name) -> the container, for every registrar and liveness probe."""
    r = rendered_case(case)
    return {
        (pod, c["name"]): c
        for pod, spec in (("controller", controller_pod(r)), ("node", node_pod(r)))
        for c in spec["containers"]
        if c["name"] in HELPERS
    }


def test_defaults_run_the_upstream_images_with_upstream_flags_only() -> None:
    found = helpers_by_pod(DEFAULTS)
    assert set(found) == {
        ("controller", "liveness-probe"),
        ("node", "liveness-probe"),
        ("node", "node-driver-registrar"),
    }
    for (pod, name), c in found.items():
        assert c["image"] == UPSTREAM_HELPER_IMAGES[name], (pod, name)
        # The image's own entrypoint runs, with flags only: no subcommand, no command override.
        assert "command" not in c
        assert all(a.startswith("--") for a in c["args"]), (pod, name, c["args"])
        flags = {a[2:].split("=", 1)[0] for a in c["args"]}
        assert flags <= UPSTREAM_FLAGS[HELPERS[name]], (pod, name, flags)
        assert not flags & DEPRECATED, (pod, name, flags)
    assert found[("node", "node-driver-registrar")]["args"] == REGISTRAR_ARGS
    assert found[("node", "liveness-probe")]["args"] == NODE_PROBE_ARGS
    assert found[("controller", "liveness-probe")]["args"] == CONTROLLER_PROBE_ARGS


def test_the_registrar_is_probed_upstream_style() -> None:
    """node-driver-registrar's README (v2.17.0): an HTTP probe on /healthz of --http-endpoint,
    which fails while the registration socket is missing; the exec probe of
    --mode=kubelet-registration-probe exits 0 whatever happens since v2.9."""
    registrar = helpers_by_pod(DEFAULTS)[("node", "node-driver-registrar")]
    assert registrar["ports"] == [{"name": "registrar", "containerPort": 9809, "protocol": "TCP"}]
    probe = registrar["livenessProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "registrar"}
    assert "exec" not in probe


def test_the_projects_option_differs_in_image_and_subcommand_only() -> None:
    upstream = helpers_by_pod(DEFAULTS)
    own = helpers_by_pod(PROJECT_HELPERS)
    assert set(own) == set(upstream)
    driver_image = rendered_case(DEFAULTS).values["driver"]["image"]
    for key, c in own.items():
        u = upstream[key]
        assert c["image"] == f"{driver_image['repository']}:{driver_image['tag']}", key
        assert c["imagePullPolicy"] == driver_image["pullPolicy"], key
        assert c["args"] == [HELPERS[key[1]], *u["args"]], key
        # Name, ports, probes, security context, resources and mounts are the same.
        same = {k: v for k, v in c.items() if k not in {"image", "imagePullPolicy", "args"}}
        assert same == {k: v for k, v in u.items() if k not in {"image", "imagePullPolicy", "args"}}
