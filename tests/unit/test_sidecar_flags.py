"""The registrar's and the liveness probe's flags read as upstream's do.

The flags of `csi-hostpath registrar` and `csi-hostpath livenessprobe` read as upstream's do
(node-driver-registrar v2.17.0, livenessprobe v2.19.0): the same names and defaults, Go
durations, klog's --v, and --health-port and --http-endpoint never both."""

from __future__ import annotations

import argparse

import pytest

from csi_hostpath.cli import build_parser
from csi_hostpath.sidecars.flags import go_duration, http_endpoint


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def refused(*argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    return capsys.readouterr().err


REG = ("registrar", "--kubelet-registration-path=/var/lib/kubelet/plugins/d/csi.sock")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("1.5h", 5400.0), ("250us", 2.5e-4)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1x", "s", "-1s", "1s2"])
def test_not_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        go_duration(text)


def test_registrar_defaults_are_upstreams() -> None:
    args = parse(*REG)
    assert args.csi_address == "/run/csi/socket"
    assert args.plugin_registration_path == "/registration"
    assert args.timeout == 1.0
    assert args.v == 0
    assert http_endpoint(args, default_port=0) is None  # no /healthz unless asked


def test_registrar_flags_as_the_chart_writes_them() -> None:
    args = parse(
        *REG,
        "--csi-address=unix:///csi/csi.sock",
        "--plugin-registration-path=/registration",
        "--http-endpoint=:9809",
        "--timeout=10s",
        "--v=2",
    )
    assert args.csi_address == "/csi/csi.sock"
    assert args.kubelet_registration_path == "/var/lib/kubelet/plugins/d/csi.sock"
    assert http_endpoint(args, default_port=0) == ("", 9809)
    assert args.timeout == 10.0
    assert args.v == 2


def test_kubelet_registration_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--kubelet-registration-path" in refused("registrar", capsys=capsys)


def test_registrar_deprecated_health_port() -> None:
    assert http_endpoint(parse(*REG, "--health-port=9809"), default_port=0) == ("", 9809)
    both = parse(*REG, "--health-port=9809", "--http-endpoint=:9810")
    with pytest.raises(ValueError, match="only one of --health-port and --http-endpoint"):
        http_endpoint(both, default_port=0)


def test_livenessprobe_defaults_are_upstreams() -> None:
    args = parse("livenessprobe")
    assert args.csi_address == "/run/csi/socket"
    assert args.probe_timeout == 3.0
    assert http_endpoint(args, default_port=9808) == ("", 9808)


def test_livenessprobe_endpoints() -> None:
    args = parse("livenessprobe", "--http-endpoint=[::1]:9808", "--probe-timeout=5s")
    assert http_endpoint(args, default_port=9808) == ("::1", 9808)
    assert args.probe_timeout == 5.0
    assert http_endpoint(parse("livenessprobe", "--health-port=9900"), 9808) == ("", 9900)
    # Upstream cannot tell an explicit default from none, so neither refuses this.
    same = parse("livenessprobe", "--health-port=9808", "--http-endpoint=:9100")
    assert http_endpoint(same, default_port=9808) == ("", 9100)
    both = parse("livenessprobe", "--health-port=9900", "--http-endpoint=:9100")
    with pytest.raises(ValueError, match="only one of"):
        http_endpoint(both, default_port=9808)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (("livenessprobe", "--csi-address=csi.sock"), "absolute socket path"),
        (("livenessprobe", "--csi-address=tcp://10.0.0.1:5000"), "absolute socket path"),
        (("livenessprobe", "--http-endpoint=9808"), "HOST:PORT or :PORT"),
        (("livenessprobe", "--http-endpoint=:70000"), "HOST:PORT or :PORT"),
        (("livenessprobe", "--health-port=-1"), "not a TCP port"),
        (("livenessprobe", "--probe-timeout=0"), "above 0"),
        (("livenessprobe", "--probe-timeout=5"), "write it as Go does"),
        ((*REG, "--timeout=1"), "write it as Go does"),
    ],
)
def test_bad_flags_are_refused(
    argv: tuple[str, ...], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert complaint in refused(*argv, capsys=capsys)
