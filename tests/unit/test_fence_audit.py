"""In --mode all, a fence is one audit row and counts once, however it is reported.

In --mode all the node and the controller share one database: a fence the node records itself
and then reports through the pool's events directory must still be one audit row, and the fence
counter must read 1. Importing an event twice (a crash between the insert and the unlink) must
not add a second row either."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from csi_hostpath.daemon.server import Driver
from tests.conftest import Client
from tests.support import helpers as h
from tests.unit.builders import quiet_fake_driver


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[Driver, Client]]:
    """A driver in --mode all with its metrics, which it keeps only where an address serves
    them."""
    extra = ["--metrics-address", "127.0.0.1:0"]
    with quiet_fake_driver(tmp_path, capacity_bytes=256 << 20, extra=extra) as pair:
        yield pair


def _fence_one(driver: Driver, client: Client, tmp_path: Path) -> str:
    cap = h.mount_cap("ext4")
    vol = h.create(client, "fenced", cap, 16 * h.MiB)
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    staging = tmp_path / "staging"
    staging.mkdir()
    h.stage(client, vol, staging, cap, ctx)
    driver.store.force_detach(vol.volume_id, "node-a", lambda _p: None, "operator", "test")
    assert driver.ledger is not None and driver.node is not None
    driver.ledger.reconcile()  # rewrites the lease the node reads
    assert driver.node.agent.fence_revoked() == [vol.volume_id]
    return str(vol.volume_id)


def _fence_counter(driver: Driver) -> float:
    assert driver.metrics is not None
    text = generate_latest(driver.metrics.registry).decode()
    line = next(x for x in text.splitlines() if x.startswith("csi_hostpath_fenced_volumes_total"))
    return float(line.split()[-1])


def test_a_fence_in_mode_all_is_audited_once(
    counted: tuple[Driver, Client], tmp_path: Path
) -> None:
    driver, client = counted
    volume_id = _fence_one(driver, client, tmp_path)
    assert driver.ledger is not None
    driver.ledger.import_events()
    fences = [e for e in driver.store.audit(volume_id) if e.action == "fenced"]
    assert len(fences) == 1, fences
    assert _fence_counter(driver) == 1


def test_an_event_imported_twice_is_one_row(drv: tuple[Driver, Client], tmp_path: Path) -> None:
    driver, client = drv
    volume_id = _fence_one(driver, client, tmp_path)
    events = sorted(driver.layout.events.glob("*.json"))
    assert len(events) == 1
    saved = events[0].read_bytes()
    assert driver.ledger is not None
    driver.ledger.import_events()
    events[0].write_bytes(saved)  # as if the import crashed before it removed the file
    driver.ledger.import_events()
    fences = [e for e in driver.store.audit(volume_id) if e.action == "fenced"]
    assert len(fences) == 1, fences
    assert not list(driver.layout.events.glob("*.json"))
