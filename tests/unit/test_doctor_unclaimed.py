"""doctor fails on a mount a node left unclaimed, as inspect calls it stuck, with one next step.

A node killed -9 inside NodeStage (after the mount, before its record) restarts, finds its
device still mounted, leaves it in place and lists it "unclaimed" in its heartbeat
(service/node/adopt.py). `inspect` says the volume is stuck; doctor said "0 fail"."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.cli.main import main
from csi_hostpath.doctor import diagnose
from csi_hostpath.store.pool_layout import PoolLayout
from tests.support import helpers as h
from tests.unit.builders import quiet_fake_driver

STAGING = "/var/lib/kubelet/plugins/kubernetes.io/csi/loop.hostpath.csi.dev/abc/globalmount"
ENTRY = {"unclaimed": "no record of it", "device": "/dev/loop9", "mounts": [STAGING]}


def test_doctor_and_inspect_both_call_an_unclaimed_mount_stuck(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with quiet_fake_driver(tmp_path, 64 << 20) as (driver, client):
        volume = h.create(client, "left", h.mount_cap(), size=h.MiB)
        layout = PoolLayout(driver.config.pool_dir)
        layout.beat_volume("node-a", volume.volume_id, ENTRY)
        state, pool = driver.config.state_dir, driver.config.pool_dir

        findings = [f for f in diagnose(state, pool) if f.check == "unclaimed-mount"]
        assert [f.status for f in findings] == ["fail"], findings
        assert volume.volume_id in findings[0].detail and STAGING in findings[0].detail
        assert "NodeUnstage" in findings[0].fix
        assert f"csi-hostpath inspect {volume.volume_id}" in findings[0].fix

        capsys.readouterr()
        argv = ["--state-dir", str(state), "--pool-dir", str(pool)]
        assert main(["inspect", volume.volume_id, *argv]) == 0
        inspected = capsys.readouterr().out
        staged = next(line for line in inspected.splitlines() if line.startswith("staged"))
        assert "stuck" in staged and STAGING in staged
        # The same words in both: what inspect says is what doctor says.
        assert findings[0].fix.split(";")[0] in inspected


def test_doctor_is_quiet_when_no_node_reports_one(tmp_path: Path) -> None:
    with quiet_fake_driver(tmp_path, 64 << 20) as (driver, _client):
        findings = diagnose(driver.config.state_dir, driver.config.pool_dir)
        mine = [f for f in findings if f.check == "unclaimed-mount"]
        assert [f.status for f in mine] == ["ok"], mine
