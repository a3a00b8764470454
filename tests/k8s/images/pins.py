"""The pins of tools/cluster per Kubernetes minor, read as tools/cluster/pins.sh reads them.

versions.env is the default minor's (None here); versions-1.MM.env holds another minor's pins
that follow Kubernetes, read over versions.env. KUBERNETES_VERSION selects one in the scripts."""

from __future__ import annotations

import os

from tests.chart.chart_tool import ROOT

CLUSTER = ROOT / "tools" / "cluster"
# The minors with pins: versions.env's own (None) and each versions-1.MM.env's.
MINORS: list[str | None] = [
    None,
    *sorted(p.name[len("versions-") : -len(".env")] for p in CLUSTER.glob("versions-1.*.env")),
]


def _read(name: str) -> dict[str, str]:
    lines = (CLUSTER / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def pins(minor: str | None = None) -> dict[str, str]:
    """versions.env, with a minor's own file over it."""
    default = _read("versions.env")
    return default if minor is None else {**default, **_read(f"versions-{minor}.env")}


def minor_env(minor: str | None, **more: str) -> dict[str, str]:
    """The environment that selects a minor (None: the default, whatever the caller's says)."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_VERSION"}
    if minor is not None:
        env["KUBERNETES_VERSION"] = f"v{minor}"
    return {**env, **more}
