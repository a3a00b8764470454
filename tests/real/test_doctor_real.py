"""`csi-hostpath doctor` on this machine's real loop devices, filesystems and pool.

`csi-hostpath doctor` on this machine's real loop devices and filesystems: every check passes
on a machine with loop devices and every tool, an xfs pool on a loop device says reflink works,
and doctor names which database owns the pool (the controller refuses a second database at
start, tests/real/test_pool_truth.py::test_a_second_database_is_refused) and the take-over
command, before anyone starts it. The checks on prepared failures: tests/unit/test_doctor.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from csi_hostpath.doctor import diagnose, exit_code
from csi_hostpath.doctor.pool_checks import check_owner
from csi_hostpath.store.backing.owner import rebuild_command
from tests.conftest import in_process
from tests.support.needs import needs_fs
from tests.unit.test_doctor import TOOLS, checks_by_name, needs_loop_control, real_tools


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


def test_this_machine_has_loop_devices_and_every_tool(workdir: Path) -> None:
    needs_loop_control()
    state = workdir / "state"
    state.mkdir()
    real_tools()
    findings = checks_by_name(diagnose(state, state / "pool"))

    assert findings["loop-control"].status == "ok", findings["loop-control"]
    assert findings["loop-devices"].status == "ok", findings["loop-devices"]
    assert findings["loop-devices"].detail.endswith("is free")
    for name in TOOLS:
        assert findings[f"tool:{name}"].status == "ok", findings[f"tool:{name}"]
    assert findings["state-dir"].status == "ok"
    assert findings["state-lock"].detail == "no daemon holds it (no lock file yet)"
    assert "socket" not in findings  # no endpoint, no socket check
    # The pool does not exist yet: measured (and reflink-tested) in its parent, left clean.
    assert findings["pool-dir"].status == "warn"
    assert "will be created" in findings["pool-dir"].detail
    assert findings["pool-space"].detail.endswith(f"(measured at {state})")
    assert findings["pool-reflink"].detail.startswith("reflink: ")
    assert sorted(os.listdir(state)) == []
    # Nothing here is broken; a missing capability or small disk is only a warning.
    assert not [f for f in findings.values() if f.status == "fail"]
    assert exit_code(list(findings.values())) == 0


@needs_fs("xfs")
def test_reflink_on_an_xfs_pool(workdir: Path) -> None:
    needs_loop_control()
    real_tools()
    image = workdir / "xfs.img"
    with open(image, "wb") as handle:
        handle.truncate(320 << 20)  # mkfs.xfs needs 300 MiB
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mnt = workdir / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        (mnt / "pool").mkdir()
        findings = checks_by_name(diagnose(workdir / "state", mnt / "pool"))
        assert findings["pool-dir"].status == "ok"
        assert "xfs on /dev/loop" in findings["pool-dir"].detail
        assert f"mounted at {mnt}" in findings["pool-dir"].detail
        reflink = findings["pool-reflink"]
        assert reflink.status == "ok"
        assert reflink.detail.startswith("reflink: yes (snapshots are instant) on xfs")
        assert os.listdir(mnt / "pool") == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)  # the loop device autoclears
