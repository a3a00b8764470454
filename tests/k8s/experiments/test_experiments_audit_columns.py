"""The experiments read `ledger audit` by column position: the columns they read stay put.

The experiments read `ledger audit` by column position, as a script would: the columns a
script reads stay where they were when the volume's name was added to the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.cli import main
from tests.k8s.experiments.context import audit_rows
from tests.support import helpers as h
from tests.unit.builders import quiet_fake_driver


def test_the_audit_rows_keep_node_and_generation_where_scripts_read_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with quiet_fake_driver(tmp_path, 256 << 20) as (driver, client):
        cap = h.mount_cap("ext4")
        vol = h.create(client, "kept", cap, 32 * h.MiB)
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        h.unpublish(client, vol.volume_id, "node-a")
        state, pool = driver.config.state_dir, driver.config.pool_dir
        capsys.readouterr()
        argv = ["ledger", "audit", "--state-dir", str(state), "--pool-dir", str(pool)]
        assert main(argv) == 0
    rows = audit_rows(capsys.readouterr().out)
    assert [(r[2], r[3], r[4], r[5], r[6]) for r in rows] == [
        ("publish", vol.volume_id, "node-a", ctx["generation"], "kept"),
        ("unpublish", vol.volume_id, "node-a", ctx["generation"], "kept"),
    ]
