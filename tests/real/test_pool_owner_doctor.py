"""`doctor` reports which database owns the pool (issue 11: "a pool-ownership marker stops two
databases from claiming one pool"): the controller refuses a second database at start
(tests/real/test_pool_truth.py::test_a_second_database_is_refused); doctor says so before anyone
starts it, and names the take-over command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from csi_hostpath.doctor.pool import check_owner
from csi_hostpath.store.backing.owner import rebuild_command
from tests.conftest import in_process


def test_doctor_names_the_pools_owner_and_the_take_over(workdir: Path) -> None:
    pool, other = workdir / "pool", workdir / "other-pool"
    assert check_owner(pool, workdir / "a-state").status == "ok"  # nobody claimed it yet
    with in_process(workdir, "a", "--pool-dir", str(pool)):
        pass
    with in_process(workdir, "b", "--pool-dir", str(other)):
        pass  # a database that claimed another pool

    mine = check_owner(pool, workdir / "a-state")
    assert mine.status == "ok" and "this state directory" in mine.detail

    # A node plugin's state directory (no database of a controller): fine, but said.
    node = check_owner(pool, workdir / "node-state")
    assert node.status == "ok" and str(workdir / "a-state") in node.detail

    # Another controller's database pointed at this pool: refused at start, so warned here.
    second = check_owner(pool, workdir / "b-state")
    assert second.status == "warn", second
    assert str(workdir / "a-state") in second.detail
    assert rebuild_command(workdir / "b-state", pool) in second.fix

    out = subprocess.run(
        [sys.executable, "-m", "csi_hostpath", "doctor", "--state-dir", str(workdir / "b-state"),
         "--pool-dir", str(pool)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    line = next(x for x in out.stdout.splitlines() if "pool-owner" in x)
    assert line.startswith("WARN"), out.stdout
