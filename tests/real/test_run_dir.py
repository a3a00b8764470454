"""`make run`, `make clean` and `make clean-volumes` with a real driver and real devices.

`make run`, `make clean` and `make clean-volumes` with a real driver, a real mount and real loop
devices: clean leaves every volume alone, clean-volumes removes them only once nothing is
mounted, and the driver's stop says what is still mounted."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, mounts_under, released_after_teardown
from tests.support.make_run import REPO, MakeRun, checkout_copy, make_in, make_run_session
from tests.support.volume_cli_runner import Cli


@pytest.fixture
def session(workdir: Path) -> Iterator[tuple[Cli, MakeRun]]:
    root = workdir / "session"
    root.mkdir()
    log = workdir / "make-run.log"
    with make_run_session(workdir / ".run", root, log, run_dir_env=True) as both:
        yield both


def test_make_clean_keeps_the_volumes_and_clean_volumes_waits_for_the_unmount(
    session: tuple[Cli, MakeRun], workdir: Path
) -> None:
    cli, run = session
    run_dir = run.run_dir
    keep = cli.root / "keep"
    run.start()
    vol = cli.json("create", "keep", "--size", "64Mi")
    cli.json("mount", "keep", "./keep")
    (keep / "important.txt").write_text("important")
    stopped = run.stop(signal.SIGTERM)  # as `make clean`'s help asked before

    copy = checkout_copy(workdir)
    cleaned = make_in(copy, "clean", f"RUN_DIR={run_dir}")
    assert cleaned.returncode == 0, cleaned.stderr
    assert (keep / "important.txt").read_text() == "important"
    image = run_dir / "state" / "pool" / "volumes" / f"{vol['volume_id']}.img"
    assert image.is_file()
    assert [p.name for p in copy.iterdir() if p.name.startswith(".")] == []  # venv, caches gone
    # The stop named the volume left mounted and the command that unmounts it.
    assert f"keep at {keep}" in stopped and f"csi-hostpath volume unmount {keep}" in stopped

    refused = make_in(copy, "clean-volumes", f"RUN_DIR={run_dir}", "YES=1")
    assert refused.returncode != 0
    assert f"mounted: volume keep at {keep}" in refused.stderr
    assert "attached: /dev/loop" in refused.stderr
    assert (keep / "important.txt").read_text() == "important" and image.is_file()

    run.start()
    cli.json("unmount", "keep")
    assert "still mounted" not in run.stop(signal.SIGINT)

    # Nobody to ask and no YES: the list of what would go, and nothing removed.
    unasked = make_in(copy, "clean-volumes", f"RUN_DIR={run_dir}")
    assert unasked.returncode != 0 and image.is_file()
    assert "volume keep, 64Mi" in unasked.stdout and vol["volume_id"] in unasked.stdout

    removed = make_in(copy, "clean-volumes", f"RUN_DIR={run_dir}", "YES=1")
    assert removed.returncode == 0, removed.stderr
    assert not run_dir.exists()
    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []


def test_clean_volumes_with_no_volume_says_so_and_asks_for_nothing(
    session: tuple[Cli, MakeRun],
) -> None:
    cli, run = session
    run.start()
    cli.json("create", "v", "--size", "32Mi")
    cli.json("delete", "v")
    run.stop(signal.SIGTERM)
    done = make_in(REPO, "clean-volumes", f"RUN_DIR={run.run_dir}")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert f"nothing to clean: {run.run_dir} holds no volume and no snapshot" in said, said
    assert "YES=1" not in said and "nothing removed" not in said, said


def test_sigint_to_makes_own_pid_stops_the_driver(session: tuple[Cli, MakeRun]) -> None:
    cli, run = session
    run.start()
    cli.json("create", "v", "--size", "32Mi")
    stopped = run.stop(signal.SIGINT)  # make alone: not its process group
    assert "still mounted" not in stopped
    assert loops_backed_under(run.run_dir) == []


def test_a_second_make_run_says_that_a_driver_runs_and_where(
    session: tuple[Cli, MakeRun],
) -> None:
    cli, run = session
    run.start()
    cli.json("create", "v", "--size", "32Mi")
    cli.json("mount", "v", "./v")
    try:
        second = subprocess.run(
            ["make", "-s", "-C", str(REPO), "run", f"RUN_DIR={run.run_dir}", "NODE_ID=node-a"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
        said = second.stdout + second.stderr
        assert second.returncode != 0
        # Not the stop of a driver that never started, nor advice about --state-dir.
        assert "the driver stopped" not in said and "--state-dir" not in said, said
        assert f"a driver is already running on {run.run_dir}" in said, said
        assert f"socket {run.run_dir / 'csi.sock'}" in said
        assert "pid " in said
        assert h.mounted(cli.root / "v")  # the first driver still serves its mount
    finally:
        cli("unmount", "./v", ok=False)
    cli.json("delete", "v")
    assert "still mounted" not in run.stop(signal.SIGTERM)
