"""The command lines of `csi-hostpath registrar` and `csi-hostpath livenessprobe`.

The flags keep the names, defaults and forms of node-driver-registrar v2.17.0 and livenessprobe
v2.19.0, so a manifest written for the upstream images works with the subcommand in front: Go
durations (`--timeout=1s`, `--probe-timeout=500ms`), klog's `--v=N`, `--http-endpoint=:PORT`,
and the deprecated `--health-port` that may not be combined with it. This module imports no grpc,
so `--help` and a bad flag cost nothing.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

# Upstream defaults (cmd/csi-node-driver-registrar/main.go, cmd/livenessprobe/main.go).
DEFAULT_CSI_ADDRESS = "/run/csi/socket"
DEFAULT_REGISTRATION_DIR = "/registration"
DEFAULT_LIVENESS_PORT = 9808

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def go_duration(text: str) -> float:
    """A Go duration as time.ParseDuration reads it ("1s", "1m30s", "250ms", "0"), in seconds."""
    if text == "0":
        return 0.0
    if not text:
        raise argparse.ArgumentTypeError("an empty duration; write it like 1s or 500ms")
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration; write it as Go does, like 1s, 500ms or 1m30s"
            )
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    return total


def positive_duration(text: str) -> float:
    value = go_duration(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a duration above 0, got {text!r}")
    return value


def csi_socket(address: str) -> str:
    """The CSI driver's socket path from --csi-address: a path, or unix:// and a path, as
    csi-lib-utils accepts them. Our driver listens on a unix socket only, so nothing else is."""
    path = address.removeprefix("unix://")
    if not path.startswith("/"):
        raise argparse.ArgumentTypeError(
            f"--csi-address must be an absolute socket path or unix:///path, got {address!r}"
        )
    return path


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return value


def listen_address(text: str) -> tuple[str, int] | None:
    """`--http-endpoint` as Go's net.Listen reads it: HOST:PORT, [V6]:PORT or :PORT (every
    address). The host "" means all of them; port 0, any free port (the log names it); an
    empty flag, no server."""
    if not text:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(
            f"--http-endpoint must be HOST:PORT or :PORT, like :9809, got {text!r}"
        )
    return host.strip("[]"), int(port_text)


def http_endpoint(args: argparse.Namespace, default_port: int) -> tuple[str, int] | None:
    """Where /healthz listens: --http-endpoint, else --health-port (0: nowhere). Setting both is
    refused, as upstream refuses it."""
    health_port = args.health_port
    if args.http_endpoint and health_port is not None and health_port != default_port:
        raise ValueError("only one of --health-port and --http-endpoint can be set")
    if args.http_endpoint:
        chosen_endpoint: tuple[str, int] = args.http_endpoint
        return chosen_endpoint
    chosen = default_port if health_port is None else health_port
    return ("", chosen) if chosen else None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--csi-address",
        type=csi_socket,
        default=DEFAULT_CSI_ADDRESS,
        help=f"the CSI driver's socket, a path or unix:///path (default {DEFAULT_CSI_ADDRESS})",
    )
    p.add_argument(
        "--http-endpoint",
        type=listen_address,
        default=None,
        help="HOST:PORT or :PORT where GET /healthz is served (default: off)",
    )
    p.add_argument(
        "--v",
        type=int,
        default=0,
        metavar="N",
        help="log verbosity as klog counts it: 4 and above log every call (DEBUG; default "
        "%(default)s)",
    )


def add_sidecar_parsers(sub: Any) -> None:
    reg = sub.add_parser(
        "registrar",
        help="register the node plugin with the kubelet (what node-driver-registrar does)",
        description="Serve the kubelet's plugin registration API on "
        "PLUGIN_REGISTRATION_PATH/<driver>-reg.sock, naming the CSI driver found at "
        "--csi-address and its socket on the host (--kubelet-registration-path).",
    )
    _common(reg)
    reg.add_argument(
        "--kubelet-registration-path",
        required=True,
        help="the CSI driver's socket as the kubelet sees it on the host, "
        "like /var/lib/kubelet/plugins/<driver>/csi.sock",
    )
    reg.add_argument(
        "--plugin-registration-path",
        default=DEFAULT_REGISTRATION_DIR,
        help="the kubelet's plugins_registry directory as mounted here "
        f"(default {DEFAULT_REGISTRATION_DIR})",
    )
    reg.add_argument(
        "--health-port",
        type=port,
        default=None,
        help="(deprecated: use --http-endpoint) TCP port of /healthz; 0 turns it off",
    )
    reg.add_argument(
        "--timeout",
        type=positive_duration,
        default=1.0,
        help="how long one call to the driver or to the registration socket may take "
        "(a Go duration, default 1s)",
    )

    probe = sub.add_parser(
        "livenessprobe",
        help="serve the CSI driver's Probe as HTTP /healthz (what livenessprobe does)",
        description="GET /healthz calls Probe on the CSI driver at --csi-address: 200 ok when it "
        "answers ready, 500 with the reason otherwise.",
    )
    _common(probe)
    probe.add_argument(
        "--health-port",
        type=port,
        default=None,
        help=f"(deprecated: use --http-endpoint) TCP port of /healthz "
        f"(default {DEFAULT_LIVENESS_PORT})",
    )
    probe.add_argument(
        "--probe-timeout",
        type=positive_duration,
        default=3.0,
        help="how long one probe (connect and Probe) may take (a Go duration, default 3s)",
    )
