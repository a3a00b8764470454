"""A busy unpublish names the process that holds the target, on the fake kernel.

A busy unpublish names who holds the target (pid and command) in the error, in the
log and in `inspect`, on the fake kernel (no root). The real-device twin is
tests/real/test_busy_holders_real.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from csi_hostpath.service.inspect import inspect_volume
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import Holder, System
from csi_hostpath.system.fake import FakeKernel, fake_system
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.unit.builders import node_context


def inspect(workdir: Path, volume_id: str) -> dict[str, dict[str, str]]:
    """`csi-hostpath inspect VOLUME`, in this process."""
    store = Store(workdir / "ctrl-state" / "state.db")
    try:
        phases = inspect_volume(store, PoolLayout(workdir / "pool"), volume_id, 30)
    finally:
        store.close()
    return {p.phase: {"state": p.state, "detail": p.detail, "reason": p.reason} for p in phases}


@contextmanager
def fake_driver(workdir: Path, *flags: str) -> Iterator[tuple[Client, FakeKernel]]:
    """A `--mode all` driver on a fake kernel, its pool in workdir/pool (what inspect reads)."""
    kernel = FakeKernel()

    def system(pool_dir: Path) -> System:
        return fake_system(pool_dir, kernel=kernel)

    pool = ("--pool-dir", str(workdir / "pool"))
    with in_process(workdir, "ctrl", *pool, *flags, system=system, kernel=kernel) as client:
        yield client, kernel


def test_a_busy_unpublish_names_the_holder_in_error_log_and_inspect(
    workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="csi_hostpath")
    with fake_driver(workdir) as (client, kernel):
        vol, staging, target = h.in_use(client, workdir, "busy", h.mount_cap("ext4"))
        kernel.hold(str(target / "sub"), Holder(4242, "postgres-writer", "cwd"))

        with pytest.raises(grpc.RpcError) as refused:
            h.node_unpublish(client, vol.volume_id, target)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "pid 4242 (postgres-writer, cwd)" in (refused.value.details() or "")
        assert f"{target} is busy: held by pid 4242 (postgres-writer, cwd)" in caplog.text

        deadline = time.monotonic() + 10  # the next heartbeat carries it
        published = inspect(workdir, vol.volume_id)["published"]
        while published["state"] != "stuck" and time.monotonic() < deadline:
            time.sleep(0.1)
            published = inspect(workdir, vol.volume_id)["published"]
        assert published["state"] == "stuck", published
        assert "pid 4242 (postgres-writer, cwd)" in published["reason"], published

        kernel.let_go(4242)
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
        deadline = time.monotonic() + 10
        while "stuck" in str(inspect(workdir, vol.volume_id)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert inspect(workdir, vol.volume_id)["published"]["state"] != "stuck"


def test_a_path_released_another_way_is_no_longer_reported_busy(tmp_path: Path) -> None:
    """A fence unmounts lazily, past NodeMounts.unmount: the busy note of that target or staging
    path must not outlive it (inspect would show a re-staged volume stuck on old holders)."""
    from csi_hostpath.core.model import AccessMode, AccessType, Capability
    from csi_hostpath.service.node.node_mounts import NodeMounts

    store = Store(tmp_path / "state.db")
    try:
        (tmp_path / "pool").mkdir()
        system = fake_system(tmp_path / "pool")
        mounts = NodeMounts(node_context(tmp_path, store, system, PoolLayout(tmp_path / "pool")))
        target, staging = tmp_path / "target", tmp_path / "staging"
        target.mkdir()
        mounts.note_busy(str(target), "held by pid 1 (x, cwd)")
        mounts.note_busy(str(staging), "held by pid 1 (x, cwd)")
        mounts.take_down_target("vol-x", str(target), recorded=True, lazy=True)  # as a fence
        assert str(target) not in mounts.busy
        system.pool.create(system.pool.root / "v.img", 16 << 20)
        device = system.loop.attach(system.pool.root / "v.img", "csihp:t:v")
        cap = Capability(AccessType.MOUNT, AccessMode.SINGLE_NODE_WRITER, "ext4")
        mounts.mount_staging("v", device.path, str(staging), "ext4", cap)
        assert str(staging) not in mounts.busy
    finally:
        store.close()
