"""A busy unpublish on real devices names the process that holds the target.

On real loop devices through a real driver: a NodeUnpublishVolume that the kernel
refuses (EBUSY) names the process holding the target, by pid and command, in the error, the log
and `inspect`. The fake-kernel twin is tests/unit/test_busy_holders.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import helpers as h
from tests.support.processes import inspect


def _holder(kind: str, target: Path) -> subprocess.Popen[bytes]:
    if kind == "mount":  # a shell sitting in the volume, as `kubectl exec ... cd /data` leaves
        return subprocess.Popen(["sleep", "120"], cwd=target)
    # a block volume's user keeps the device open through its target file
    code = "import sys, time; f = open(sys.argv[1], 'rb'); print(flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


@pytest.mark.parametrize("kind", ["mount", "block"])
def test_busy_unpublish_names_the_holder(spawn: Any, workdir: Path, kind: str) -> None:
    handle, client = spawn("ctrl", "--pool-dir", str(workdir / "pool"))
    cap = h.mount_cap("ext4") if kind == "mount" else h.block_cap()
    vol, staging, target = h.in_use(client, workdir, "busy", cap)
    holder = _holder(kind, target)
    command = "sleep" if kind == "mount" else Path(sys.executable).name
    how = "cwd" if kind == "mount" else "open file"
    named = f"pid {holder.pid} ({command}, {how})"
    try:
        with pytest.raises(grpc.RpcError) as refused:
            h.node_unpublish(client, vol.volume_id, target)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert named in (refused.value.details() or ""), refused.value.details()
        assert h.mounted(target)
        assert named in handle.log()
        deadline = time.monotonic() + 15  # the next heartbeat carries it
        published = inspect(workdir, vol.volume_id)["published"]
        while named not in published["reason"] and time.monotonic() < deadline:
            time.sleep(0.5)
            published = inspect(workdir, vol.volume_id)["published"]
        assert published["state"] == "stuck" and named in published["reason"], published
    finally:
        holder.kill()
        holder.wait()
    h.node_unpublish(client, vol.volume_id, target)
    h.unstage(client, vol.volume_id, staging)
    assert not h.mounted(target) and not h.mounted(staging)
