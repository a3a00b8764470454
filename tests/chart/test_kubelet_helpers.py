"""The registrar's and the liveness probe's flags in the chart, on either implementation.

The registrar and the liveness probe in the chart: by default kubernetes-csi's images, with
implementation: csi-hostpath the driver image's own `csi-hostpath registrar` and
`csi-hostpath livenessprobe`. Every flag the chart writes must be one the pinned upstream release
defines and must parse with the driver's own command line, so that switching the implementation
changes nothing else."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from csi_hostpath.cli import build_parser
from csi_hostpath.sidecars.flags import http_endpoint
from tests.chart import chart_tool
from tests.chart.chart_objects import (
    UPSTREAM_HELPER_IMAGES,
    container,
    controller_pod,
    host_path_at,
    node_pod,
)
from tests.chart.chart_tool import Rendered
from tests.chart.conftest import CASES, LOCAL_CASES, Case, rendered_case

Obj = dict[str, Any]

# The flags of cmd/csi-node-driver-registrar/main.go (v2.17.0) and cmd/livenessprobe/main.go
# (v2.19.0), klog's --v among them.
UPSTREAM_FLAGS = {
    "registrar": {
        "connection-timeout",
        "timeout",
        "csi-address",
        "plugin-registration-path",
        "kubelet-registration-path",
        "health-port",
        "http-endpoint",
        "version",
        "mode",
        "enable-pprof",
        "v",
    },
    "livenessprobe": {
        "probe-timeout",
        "csi-address",
        "health-port",
        "metrics-address",
        "http-endpoint",
        "metrics-path",
        "v",
    },
}
HELPERS = {"node-driver-registrar": "registrar", "liveness-probe": "livenessprobe"}
VALUES_KEY = {"node-driver-registrar": "nodeDriverRegistrar", "liveness-probe": "livenessProbe"}

ALL_CASES = CASES + LOCAL_CASES


@pytest.fixture(params=ALL_CASES, ids=[c.name for c in ALL_CASES])
def any_shape(request: pytest.FixtureRequest) -> Rendered:
    case: Case = request.param
    return rendered_case(case)


def pods(r: Rendered) -> list[Obj]:
    found = [node_pod(r)]
    if r.of_kind("StatefulSet"):
        found.append(controller_pod(r))
    return found


def helpers(r: Rendered) -> list[tuple[Obj, Obj, str]]:
    """(pod spec, container, subcommand) of every registrar and liveness probe rendered."""
    return [
        (spec, c, HELPERS[c["name"]])
        for spec in pods(r)
        for c in spec["containers"]
        if c["name"] in HELPERS
    ]


def upstream(r: Rendered, c: Obj) -> bool:
    implementation: str = r.values["sidecars"][VALUES_KEY[c["name"]]]["implementation"]
    return implementation == "upstream"


def parsed(command: str, c: Obj) -> argparse.Namespace:
    """The container's flags as the driver's own CLI reads them."""
    flags = c["args"][1:] if c["args"][0] == command else c["args"]
    return build_parser().parse_args([command, *flags])


def test_helpers_run_the_image_the_values_choose(any_shape: Rendered) -> None:
    r = any_shape
    found = helpers(r)
    assert {name for _, c, name in found} == {"registrar", "livenessprobe"}
    driver = r.values["driver"]["image"]
    for _, c, command in found:
        if upstream(r, c):
            image = r.values["sidecars"][VALUES_KEY[c["name"]]]["image"]
            assert c["image"] == f"{image['repository']}:{image['tag']}"
            assert c["imagePullPolicy"] == image["pullPolicy"]
            assert not c["args"][0].isalpha(), "an upstream image takes no subcommand"
        else:
            # The image's entrypoint is csi-hostpath: the args begin with the subcommand.
            assert c["image"] == f"{driver['repository']}:{driver['tag']}"
            assert c["imagePullPolicy"] == driver["pullPolicy"]
            assert c["args"][0] == command
            assert "command" not in c


def test_helper_flags_parse_here_and_exist_upstream(any_shape: Rendered) -> None:
    for _, c, command in helpers(any_shape):
        flags = [a for a in c["args"] if a.startswith("--")]
        names = {a[2:].split("=", 1)[0] for a in flags}
        assert names <= UPSTREAM_FLAGS[command], f"{c['name']}: not upstream's: {names}"
        parsed(command, c)  # SystemExit (a test error) if the driver's CLI refuses one


def test_registrar_flags_meet_the_kubelet(any_shape: Rendered) -> None:
    r = any_shape
    spec = node_pod(r)
    registrar = container(spec, "node-driver-registrar")
    args = parsed("registrar", registrar)
    kubelet_dir = r.values["node"]["kubeletDir"].rstrip("/")
    driver_name = r.values["driverName"]
    assert args.kubelet_registration_path == f"{kubelet_dir}/plugins/{driver_name}/csi.sock"
    assert host_path_at(spec, registrar, args.plugin_registration_path) == (
        f"{kubelet_dir}/plugins_registry"
    )
    port = r.values["sidecars"]["nodeDriverRegistrar"]["httpPort"]
    assert http_endpoint(args, default_port=0) == ("", port)
    # Its health check's GetInfo must end before the kubelet stops waiting for /healthz.
    assert args.timeout < registrar["livenessProbe"]["timeoutSeconds"]


def test_liveness_probe_answers_within_the_drivers_probe(any_shape: Rendered) -> None:
    for spec in pods(any_shape):
        driver = container(spec, "csi-hostpath")
        ports = {p["name"]: p["containerPort"] for p in driver["ports"]}
        args = parsed("livenessprobe", container(spec, "liveness-probe"))
        assert http_endpoint(args, default_port=9808) == ("", ports["healthz"])
        # A probe that gives up first answers 500 with its reason, which the kubelet records.
        assert args.probe_timeout < driver["livenessProbe"]["timeoutSeconds"]


def test_upstream_images_are_the_pinned_releases() -> None:
    r = rendered_case(next(c for c in CASES if c.name == "defaults"))
    images = {
        c["name"]: c["image"]
        for spec in pods(r)
        for c in spec["containers"]
        if c["name"] in HELPERS
    }
    assert images == UPSTREAM_HELPER_IMAGES


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (
            {"sidecars": {"nodeDriverRegistrar": {"implementation": "builtin"}}},
            "/sidecars/nodeDriverRegistrar/implementation",
        ),
        (
            {"sidecars": {"livenessProbe": {"probeTimeout": "5"}}},
            "/sidecars/livenessProbe/probeTimeout",
        ),
        (
            {"sidecars": {"nodeDriverRegistrar": {"timeout": "0s"}}},
            "/sidecars/nodeDriverRegistrar/timeout",
        ),
    ],
)
def test_schema_refuses_bad_helper_values(values: Obj, complaint: str) -> None:
    helm = chart_tool.helm()
    with pytest.raises(helm.HelmValuesError) as e:
        chart_tool.render(values)
    assert complaint in str(e.value)
