"""Freezes on the fake kernel: the node's bookkeeping and the controller/node freeze protocol.

Freezes on the fake kernel (no root). The node's bookkeeping (service/node/freeze.py): a
recorded freeze is thawed on start, EBUSY is "already frozen", the watchdog thaws and aborts.
The controller/node freeze protocol through the pool (service/controller/remote_freeze.py and
service/node/freeze_server.py): frozen for the copy and thawed after; a node restart mid-copy and
a controller that stops renewing both thaw, and the copy is refused; a silent holder refuses the
snapshot instead of passing off a crash-consistent copy. On real devices:
tests/real/test_freeze_real.py and tests/real/test_freeze_remote.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from csi_hostpath.core.errors import Busy, FreezeTimedOut
from csi_hostpath.core.ledger_rules import Lease
from csi_hostpath.core.model import AccessMode, AccessType, NodeStaging
from csi_hostpath.service.controller.remote_freeze import RemoteFreeze, Timing
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.service.node.freeze_server import FreezeServer
from csi_hostpath.store.db import Store
from csi_hostpath.store.freeze_channel import FreezeChannel
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.base import System
from csi_hostpath.system.fake import fake_system
from csi_hostpath.system.fake.fake_kernel import FakeKernel
from tests.unit.builders import controller_context, node_context

VOL = "vol-" + "a" * 32


def _mounted(tmp_path: Path) -> tuple[System, FakeKernel, str]:
    kernel = FakeKernel()
    system = fake_system(tmp_path / "pool", kernel=kernel)
    backing = tmp_path / "backing.img"
    system.pool.create(backing, 16 << 20)
    device = system.loop.attach(backing, "csihp:test:" + VOL)
    system.fs.mkfs(device.path, "ext4")
    mount_point = tmp_path / "staging"
    mount_point.mkdir()
    system.mounts.mount(device.path, str(mount_point), "ext4", [])
    return system, kernel, str(mount_point)


def test_a_freeze_left_by_a_dead_process_is_thawed_on_start(tmp_path: Path) -> None:
    system, kernel, mount_point = _mounted(tmp_path)
    dead = Freezes(tmp_path / "state", system, 30)
    dead._record(VOL, mount_point)  # what a kill -9 mid-copy leaves: the record, and the freeze
    system.fs.freeze(mount_point)
    assert dead.recorded(VOL) is not None and kernel.is_frozen(mount_point)

    Freezes(tmp_path / "state", system, 30).thaw_recorded()
    assert not kernel.is_frozen(mount_point)
    assert dead.recorded(VOL) is None


def test_a_record_without_a_freeze_is_just_cleared(tmp_path: Path) -> None:
    """FITHAW's EINVAL: the process died between the record and FIFREEZE."""
    system, kernel, mount_point = _mounted(tmp_path)
    freezes = Freezes(tmp_path / "state", system, 30)
    freezes._record(VOL, mount_point)
    freezes.thaw_recorded()
    assert freezes.recorded(VOL) is None and not kernel.is_frozen(mount_point)


def test_already_frozen_is_thawed_refrozen_and_thawed_after(tmp_path: Path) -> None:
    system, kernel, mount_point = _mounted(tmp_path)
    system.fs.freeze(mount_point)  # an operator's fsfreeze -f
    freezes = Freezes(tmp_path / "state", system, 30)
    with freezes.hold(VOL, mount_point):
        assert kernel.is_frozen(mount_point) and freezes.recorded(VOL) is not None
    assert not kernel.is_frozen(mount_point) and freezes.recorded(VOL) is None


def test_the_watchdog_thaws_and_the_copy_is_aborted(tmp_path: Path) -> None:
    system, kernel, mount_point = _mounted(tmp_path)
    freezes = Freezes(tmp_path / "state", system, 0.2)
    with pytest.raises(FreezeTimedOut), freezes.hold(VOL, mount_point):
        time.sleep(0.5)
        assert not kernel.is_frozen(mount_point), "thawed while the copy still runs"
    assert freezes.recorded(VOL) is None


def test_records_live_in_the_given_directory_and_old_state_records_are_still_thawed(
    tmp_path: Path,
) -> None:
    """The node plugin keeps its records in the pool (they outlive a lost state directory);
    a record an older version left in STATE/frozen is thawed on start all the same."""
    system, kernel, mount_point = _mounted(tmp_path)
    old = Freezes(tmp_path / "state", system, 30)
    old._record(VOL, mount_point)
    system.fs.freeze(mount_point)
    records = tmp_path / "pool" / "frozen" / "node"
    new = Freezes(tmp_path / "state", system, 30, records)
    new.thaw_recorded()
    assert not kernel.is_frozen(mount_point) and old.recorded(VOL) is None
    with new.hold(VOL, mount_point):
        assert (records / f"{VOL}.json").exists()
        assert not (tmp_path / "state" / "frozen" / f"{VOL}.json").exists()
    assert not kernel.is_frozen(mount_point) and new.recorded(VOL) is None


NODE = "node-a"
FAST = Timing(renew_seconds=0.05, silence_seconds=1.0, answer_seconds=5.0, poll_seconds=0.01)


@dataclass
class Rig:
    kernel: FakeKernel
    layout: PoolLayout
    server: FreezeServer
    freezes: Freezes
    mount_point: str
    store: Store
    system: System

    def remote(self, timing: Timing = FAST, grace: float = 60) -> RemoteFreeze:
        ctx = controller_context(self.store, self.system, self.layout, node_grace=grace)
        return RemoteFreeze(ctx, FreezeChannel(self.layout.root), timing)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    system, kernel, mount_point = _mounted(tmp_path)  # the volume VOL, mounted
    layout = PoolLayout(tmp_path / "pool")
    layout.ensure()
    device = system.loop.find("csihp:test:" + VOL)
    assert device is not None
    store = Store(tmp_path / "state.db")
    store.save_staging(
        NodeStaging(VOL, mount_point, AccessType.MOUNT,
                    AccessMode.SINGLE_NODE_WRITER, "ext4", device.path, 1, time.time())
    )  # fmt: skip
    layout.write_lease(Lease(VOL, 1, {NODE: 1}))
    layout.beat(NODE)
    freezes = Freezes(tmp_path / "state", system, 30)
    server = FreezeServer(node_context(tmp_path / "state", store, system, layout, NODE), freezes)
    server.start()
    try:
        yield Rig(kernel, layout, server, freezes, mount_point, store, system)
    finally:
        server.stop()
        store.close()


def test_frozen_for_the_copy_and_thawed_after(rig: Rig) -> None:
    with rig.remote()(VOL):
        assert rig.kernel.is_frozen(rig.mount_point)
        assert rig.freezes.recorded(VOL) is not None
    deadline = time.monotonic() + 5
    while rig.kernel.is_frozen(rig.mount_point) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not rig.kernel.is_frozen(rig.mount_point)


def test_a_node_restart_mid_copy_breaks_the_freeze_and_the_copy_is_refused(rig: Rig) -> None:
    with pytest.raises(FreezeTimedOut, match="thawed"), rig.remote()(VOL):
        assert rig.kernel.is_frozen(rig.mount_point)
        # What the restarted plugin does first: break the answers, then thaw the records.
        rig.server.break_previous()
        rig.freezes.thaw_recorded()


def test_a_controller_that_stops_renewing_is_thawed_by_the_node(rig: Rig) -> None:
    silent = Timing(renew_seconds=60, silence_seconds=0.3, answer_seconds=5, poll_seconds=0.01)
    with pytest.raises(FreezeTimedOut, match="stopped renewing"), rig.remote(silent)(VOL):
        assert rig.kernel.is_frozen(rig.mount_point)
        time.sleep(1.0)
        assert not rig.kernel.is_frozen(rig.mount_point), "thawed while the copy still runs"


def test_a_silent_holder_refuses_the_snapshot(rig: Rig) -> None:
    with pytest.raises(Busy, match="silent"), rig.remote(grace=0.0)(VOL):
        time.sleep(0.01)
    assert not rig.kernel.is_frozen(rig.mount_point)


def test_a_volume_not_mounted_on_the_holder_needs_no_freeze(rig: Rig) -> None:
    rig.store.delete_staging(VOL)
    with rig.remote()(VOL):
        assert not rig.kernel.is_frozen(rig.mount_point)
