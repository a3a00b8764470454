"""The controller/node freeze protocol through the pool (service/controller/freeze_remote.py and
service/node/freeze_remote.py) on the fake kernel: frozen for the copy and thawed after; a node
restart mid-copy and a controller that stops renewing both thaw, and the copy is refused; a
silent holder refuses the snapshot instead of passing off a crash-consistent copy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from csi_hostpath.core.errors import Busy, FreezeTimedOut
from csi_hostpath.core.ledger import Lease
from csi_hostpath.core.model import AccessMode, AccessType, NodeStaging
from csi_hostpath.service.controller.freeze_remote import RemoteFreeze, Timing
from csi_hostpath.service.guard import InFlight
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.service.node.freeze_remote import FreezeServer
from csi_hostpath.store.db import Store
from csi_hostpath.store.freeze_channel import FreezeChannel
from csi_hostpath.store.pool import PoolLayout
from csi_hostpath.system.fake.kernel import FakeKernel
from tests.unit.test_node_freeze import VOL, _mounted

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

    def remote(self, timing: Timing = FAST, grace: float = 60) -> RemoteFreeze:
        return RemoteFreeze(self.layout, FreezeChannel(self.layout.root), None, grace, 30, timing)


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
    server = FreezeServer(NODE, store, system, FreezeChannel(layout.root), freezes, InFlight())
    server.start()
    try:
        yield Rig(kernel, layout, server, freezes, mount_point, store)
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
