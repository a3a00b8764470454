"""The freeze bookkeeping of service/node/freeze.py on the fake kernel (no root): a recorded
freeze is thawed on start, EBUSY is "already frozen", the watchdog thaws and aborts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from csi_hostpath.core.errors import FreezeTimedOut
from csi_hostpath.service.node.freeze import Freezes
from csi_hostpath.system.base import System
from csi_hostpath.system.fake import fake_system
from csi_hostpath.system.fake.kernel import FakeKernel

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
