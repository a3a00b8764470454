"""Issue 11 cases 2 and 3 together, on real devices: a node plugin killed -9 while a snapshot
holds a volume's filesystem frozen, then restarted on an empty state directory (a new or
mistyped --state-dir, a hostPath that came back empty), still thaws it. The freeze record must
survive what the state directory does not: it lives in the pool, beside the node's heartbeat.

On the old code the record lived in STATE/frozen, went with the state directory, and the
restarted plugin left the filesystem frozen (its pod's writes hung in D state) until something
happened to snapshot that same volume again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath.service.node.freeze import TEST_HOLD_ENV
from tests.real.test_freeze import (
    _staged,
    always_thawed,
    kill_9_while_frozen,
    restart_thaws_then_snapshot_succeeds,
)


@pytest.mark.parametrize("loss", ["empty", "truncated"])
def test_kill_9_while_frozen_then_empty_state_still_thaws(
    spawn: Any, workdir: Path, monkeypatch: pytest.MonkeyPatch, loss: str
) -> None:
    pool = ["--pool-dir", str(workdir / "pool")]  # apart from the state: the pool stays
    monkeypatch.setenv(TEST_HOLD_ENV, "600")  # the first incarnation holds its freeze
    handle, client = spawn("frz", *pool)
    monkeypatch.delenv(TEST_HOLD_ENV)
    vol, staging = _staged(client, workdir, "frz")
    with always_thawed(staging):
        kill_9_while_frozen(handle, client, vol.volume_id, staging)
        state = workdir / "frz-state"
        if loss == "empty":
            shutil.rmtree(state)
        else:
            (state / "state.db").write_bytes(b"")
            for suffix in ("-wal", "-shm"):
                (state / f"state.db{suffix}").unlink(missing_ok=True)

        # No snapshot retry first: the start alone must thaw it.
        restart_thaws_then_snapshot_succeeds(
            handle, vol.volume_id, staging, "the restart on lost state left it frozen"
        )
