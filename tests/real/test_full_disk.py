"""Teardown works on a full disk.

The default layout puts the pool beside state.db. Here both live on one small tmpfs, a volume is
created, attached, staged and published, and the filesystem is then filled to the last byte. Every
teardown RPC (NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume) must still succeed:
the driver gives back its reserved headroom (STATE/.headroom) and retries the commit. New work is
refused with RESOURCE_EXHAUSTED, never INTERNAL."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import grpc

from tests.conftest import in_process
from tests.support import helpers as h

MiB = 1 << 20


def fill(path: Path) -> None:
    """Write until the filesystem refuses even 512 bytes."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (MiB, 4096, 512):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\xaa" * chunk)


def test_teardown_succeeds_on_a_full_pool_that_holds_the_state(workdir: Path) -> None:
    fs = workdir / "fs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "csihp-full", str(fs)], check=True)
    state = fs / "state"  # the pool defaults to STATE/pool: one filesystem for both
    cap = h.mount_cap("ext4")
    with in_process(workdir, "full", "--state-dir", str(state)) as client:
        assert (state / ".headroom").stat().st_size > 0, "the headroom is reserved at start"
        vol = h.create(client, "v", cap, 16 * MiB)
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        staging, target = workdir / "staging", workdir / "target"
        staging.mkdir()
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
        (target / "data").write_bytes(b"x" * MiB)
        fill(fs / "filler")

        # New work is refused as "no room", never INTERNAL.
        err = h.expect_code(
            grpc.StatusCode.RESOURCE_EXHAUSTED, h.create, client, "w", h.block_cap(), 4 * MiB
        )
        assert "INTERNAL" not in (err.details() or "")

        # Every teardown step succeeds on the full filesystem.
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
        h.unpublish(client, vol.volume_id, "node-a")
        h.delete(client, vol.volume_id)
        assert not list((state / "pool" / "volumes").glob("vol-*.img"))
        assert not (state / ".headroom").exists(), "the headroom was given back"
