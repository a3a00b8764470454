"""The state is root's alone, and the commands that only look only read it.

A driver's state directory is 0700 and its database files 0600 (an older state is tightened when
the driver starts); the pool's directories 0700 and its images 0600. `ledger list`, `ledger
audit`, `inspect` and `node list` open the database read-only: on a read-only mount they answer,
on a database of an older schema they say so and leave it as it is, and a user who may not read
the state is told that, with the owner, never with a traceback or "no state here"."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.store.migrations import SCHEMA_VERSION
from tests.conftest import Client, in_process
from tests.support import helpers as h

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
DATA = Path(__file__).parents[1] / "unit" / "data"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _cli(*argv: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(user or []), sys.executable, "-m", "csi_hostpath", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HOME": "/"},
    )


@pytest.fixture
def state(workdir: Path) -> Iterator[tuple[Client, Path, str]]:
    """A driver on the real layer with one volume published to node-a; its state directory."""
    workdir.chmod(0o755)  # others may walk to the state dir: only its own mode keeps them out
    with in_process(workdir, "drv") as client:
        cap = h.mount_cap("ext4")
        volume = h.create(client, "private", cap, 16 * h.MiB)
        h.publish(client, volume.volume_id, "node-a", cap)
        yield client, workdir / "drv-state", volume.volume_id


def test_the_state_and_the_pool_are_root_s_alone(state: tuple[Client, Path, str]) -> None:
    _client, state_dir, volume_id = state
    assert _mode(state_dir) == 0o700
    for name in ("state.db", "state.db-wal", "state.db-shm", ".lock"):
        assert _mode(state_dir / name) == 0o600, name
    pool = state_dir / "pool"
    for sub in ("volumes", "snapshots", "leases", "nodes", "events"):
        assert _mode(pool / sub) == 0o700, sub
    assert _mode(pool / "volumes" / f"{volume_id}.img") == 0o600


def test_an_older_open_state_is_tightened_when_the_driver_starts(workdir: Path) -> None:
    state_dir = workdir / "drv-state"
    with in_process(workdir, "drv"):
        pass
    state_dir.chmod(0o755)
    for p in state_dir.glob("state.db*"):
        p.chmod(0o644)
    (state_dir / "pool" / "volumes").chmod(0o755)
    with in_process(workdir, "drv"):
        assert _mode(state_dir) == 0o700
        assert {_mode(p) for p in state_dir.glob("state.db*")} == {0o600}
        assert _mode(state_dir / "pool" / "volumes") == 0o700


@pytest.mark.parametrize(
    "argv",
    [("ledger", "list"), ("ledger", "audit"), ("inspect", "private"), ("node", "list")],
)
def test_another_user_is_told_permission_denied(
    state: tuple[Client, Path, str], argv: tuple[str, ...]
) -> None:
    _client, state_dir, _ = state
    done = _cli(*argv, "--state-dir", str(state_dir), user=NOBODY)
    assert done.returncode == 1, done
    assert f"permission denied: the state at {state_dir} belongs to root" in done.stderr, done
    assert "Traceback" not in done.stderr and "no driver state" not in done.stderr


def test_doctor_tells_another_user_permission_denied(state: tuple[Client, Path, str]) -> None:
    _client, state_dir, _ = state
    done = _cli("doctor", "--state-dir", str(state_dir), user=NOBODY)
    assert "Traceback" not in done.stderr, done
    assert f"permission denied: the state at {state_dir} belongs to root" in done.stdout, done


def test_read_only_commands_answer_on_a_read_only_state(
    state: tuple[Client, Path, str], workdir: Path
) -> None:
    _client, state_dir, volume_id = state
    view = workdir / "ro-view"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(state_dir), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        for argv in (("ledger", "list"), ("ledger", "audit"), ("inspect", volume_id)):
            done = _cli(*argv, "--state-dir", str(view), "--pool-dir", str(state_dir / "pool"))
            assert done.returncode == 0, done
            assert "readonly" not in done.stderr and "Traceback" not in done.stderr
            assert volume_id in done.stdout, done
        force = ("ledger", "force-detach", volume_id, "--node", "node-a", "--reason", "r")
        done = _cli(*force, "--state-dir", str(view), "--pool-dir", str(state_dir / "pool"))
        assert done.returncode == 1, done
        assert f"read-only: the state at {view} is on a read-only filesystem" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_a_read_only_command_never_upgrades_an_older_database(workdir: Path) -> None:
    state_dir = workdir / "old-state"
    state_dir.mkdir(mode=0o700)
    db_path = state_dir / "state.db"
    db = sqlite3.connect(db_path)
    try:
        db.executescript((DATA / "schema_v1.sql").read_text())
    finally:
        db.close()
    before = db_path.read_bytes()
    for argv in (("ledger", "list"), ("ledger", "audit"), ("node", "list")):
        done = _cli(*argv, "--state-dir", str(state_dir))
        assert done.returncode == 1, done
        assert f"has schema version 1; this csi-hostpath reads {SCHEMA_VERSION}" in done.stderr
        assert "Traceback" not in done.stderr
    assert db_path.read_bytes() == before
    shutil.rmtree(state_dir)


def test_doctor_warns_of_a_ledger_others_may_read(state: tuple[Client, Path, str]) -> None:
    _client, state_dir, _ = state
    (state_dir / "state.db").chmod(0o644)
    done = _cli("doctor", "--state-dir", str(state_dir))
    line = next(x for x in done.stdout.splitlines() if "state-dir" in x)
    assert line.startswith("WARN") and "state.db 0644" in line, done.stdout
    assert f"chmod 700 {state_dir}" in done.stdout
