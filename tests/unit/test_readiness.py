"""Probe's readiness asks the system layer what the machine lacks.

Probe's readiness asks the system layer what the machine lacks: the real layer looks at
/dev/loop-control and the node's tools, and a driver on the fake layer is ready without root
(before this, Probe answered not ready for any non-root user, fake or not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.system.linux import NODE_TOOLS, machine_problems
from tests.conftest import Client


def test_a_driver_on_the_fake_layer_is_ready(fake_driver: Client) -> None:
    assert fake_driver.identity.Probe(pb.ProbeRequest()).ready.value is True


def test_the_real_layer_names_missing_tools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no tool at all
    problems = machine_problems()
    assert f"tools missing from PATH: {', '.join(NODE_TOOLS)}" in problems
