"""The index half of "the pool is the truth", without a driver.

The index half of "the pool is the truth", without a driver: crash windows, quarantine, and
fencing tokens that never go backwards when the database is rebuilt."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.core import ledger_rules
from csi_hostpath.core.model import AccessMode, AccessType, Capability, Publication, Volume
from csi_hostpath.core.naming import new_volume_id
from csi_hostpath.store.backing import file_identity
from csi_hostpath.store.backing.adopt_pool import adopt_pool, quarantined_files
from csi_hostpath.store.backing.owner import PoolClaimRefused, claim_pool
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout

CAP = Capability(AccessType.BLOCK, AccessMode.SINGLE_NODE_WRITER)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[tuple[Store, PoolLayout]]:
    layout = PoolLayout(tmp_path / "pool")
    layout.ensure()
    store = Store(tmp_path / "state.db")
    yield store, layout
    store.close()


def _volume(name: str = "v") -> Volume:
    return Volume(new_volume_id(), name, 1 << 20, (CAP,), "", created_at=time.time())


def _file(layout: PoolLayout, volume: Volume, *, stamped: bool = True) -> Path:
    path = layout.volume_file(volume.volume_id)
    path.write_bytes(b"\0" * 16)
    os.truncate(path, volume.capacity_bytes)
    if stamped:
        file_identity.write_identity(path, file_identity.volume_identity(volume))
    return path


def test_a_file_with_identity_and_no_record_is_adopted(pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    volume = _volume()
    _file(layout, volume)
    report = adopt_pool(store, layout)
    assert report.adopted == [volume.volume_id]
    adopted = store.get_volume(volume.volume_id)
    assert adopted is not None and (adopted.name, adopted.capabilities) == ("v", (CAP,))


def test_a_create_that_crashed_before_its_identity_is_removed(
    pool: tuple[Store, PoolLayout],
) -> None:
    """Intent written, file made, crash before the identity: never handed out, so it goes."""
    store, layout = pool
    volume = _volume()
    file_identity.begin(layout.volume_file(volume.volume_id), file_identity.volume_identity(volume))
    path = _file(layout, volume, stamped=False)
    report = adopt_pool(store, layout)
    assert report.removed == [str(path)] and not path.exists()
    assert not file_identity.intent_path(path).exists()
    assert quarantined_files(layout) == []


def test_a_crash_after_the_identity_but_before_the_commit_is_adopted(
    pool: tuple[Store, PoolLayout],
) -> None:
    store, layout = pool
    volume = _volume()
    file_identity.begin(layout.volume_file(volume.volume_id), file_identity.volume_identity(volume))
    path = _file(layout, volume)
    assert adopt_pool(store, layout).adopted == [volume.volume_id]
    assert not file_identity.intent_path(path).exists()


def test_a_file_older_than_the_intent_is_not_its_leftover(pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    volume = _volume()
    path = _file(layout, volume, stamped=False)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    file_identity.begin(path, file_identity.volume_identity(volume))
    report = adopt_pool(store, layout)
    assert report.removed == [] and not path.exists()
    assert [p.name for p in quarantined_files(layout)] == [path.name]


def test_a_name_taken_by_another_record_is_quarantined(pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    winner, loser = _volume("same"), _volume("same")
    store.insert_volume_unless_named(winner)
    _file(layout, winner)
    path = _file(layout, loser)
    report = adopt_pool(store, layout)
    assert report.adopted == [] and not path.exists()
    assert [p.name for p in quarantined_files(layout)] == [path.name]
    # Its identity went with it: the quarantined file can still say what it was.
    assert file_identity.read_identity(quarantined_files(layout)[0]) is not None


def test_records_from_before_identities_get_one(pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    volume = _volume()
    store.insert_volume_unless_named(volume)
    path = _file(layout, volume, stamped=False)
    assert adopt_pool(store, layout).stamped == [volume.volume_id]
    assert file_identity.read_identity(path) == file_identity.volume_identity(volume)


def _publish_next(store: Store, volume_id: str, node_id: str) -> int:
    def decide(
        v: Volume, holders: list[Publication], count: int, generation: int
    ) -> ledger_rules.PublishDecision:
        return ledger_rules.decide_publish(
            v, node_id, CAP, False, holders, count, 0, generation, 0.0
        )

    return store.publish_atomically(volume_id, node_id, decide, "test").publication.generation


def test_an_adopted_volume_keeps_its_tokens_and_holders(pool: tuple[Store, PoolLayout]) -> None:
    """The lease said node-b holds generation 7: after the rebuild node-b still holds it (no
    fence), and a new grant is 8, never a token that was already issued."""
    store, layout = pool
    volume = _volume()
    _file(layout, volume)
    layout.write_lease(ledger_rules.Lease(volume.volume_id, 7, {"node-b": 7}))
    adopt_pool(store, layout)
    assert store.lease(volume.volume_id) == (7, {"node-b": 7})
    store.unpublish(volume.volume_id, "node-b", "test")
    assert _publish_next(store, volume.volume_id, "node-c") == 8


def test_an_old_backup_never_issues_a_token_twice(pool: tuple[Store, PoolLayout]) -> None:
    """The database is a backup from generation 2; the lease and a node's heartbeat have seen
    newer tokens. The generation is raised to the newest, and the newer lease's holder is back."""
    store, layout = pool
    volume = _volume()
    store.insert_volume_unless_named(volume)
    _file(layout, volume)
    assert _publish_next(store, volume.volume_id, "node-a") == 1
    store.unpublish(volume.volume_id, "node-a", "test")
    layout.write_lease(ledger_rules.Lease(volume.volume_id, 5, {"node-a": 5}))
    layout.beat("node-z", {volume.volume_id: {"generation": 6, "access_type": "block"}})
    report = adopt_pool(store, layout)
    assert report.raised == [volume.volume_id]
    assert store.lease(volume.volume_id) == (6, {"node-a": 5})
    assert {a.action for a in store.audit(volume.volume_id)} >= {
        "generation-floor",
        "restore-holder",
    }


def test_a_lost_lease_restores_holders_from_heartbeats(pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    volume = _volume()
    _file(layout, volume)
    layout.beat("node-a", {volume.volume_id: {"generation": 3, "access_type": "block"}})
    adopt_pool(store, layout)
    assert store.lease(volume.volume_id) == (3, {"node-a": 3})


def test_pool_owner_marker(tmp_path: Path, pool: tuple[Store, PoolLayout]) -> None:
    store, layout = pool
    claim = claim_pool(store, layout, tmp_path / "a")
    claim.release()
    claim_pool(store, layout, tmp_path / "a").release()  # the same database: fine
    other = Store(tmp_path / "other.db")
    try:
        store.insert_volume_unless_named(_volume())
        with pytest.raises(PoolClaimRefused, match="--take-over"):
            claim_pool(other, layout, tmp_path / "b")
        # An empty database in the owner's own state directory lost its state: it takes over.
        claim_pool(other, layout, tmp_path / "a").release()
        # Now the first database is the stranger, and it is not empty.
        with pytest.raises(PoolClaimRefused, match="belongs to another database"):
            claim_pool(store, layout, tmp_path / "a")
        claim_pool(store, layout, tmp_path / "a", take_over=True).release()
    finally:
        other.close()


def test_a_large_identity_goes_to_the_sidecar(tmp_path: Path) -> None:
    """ext4 answers ENOSPC for an xattr larger than its block: that must not read as a full
    pool, so a large identity (many parameters) is written as a sidecar instead."""
    volume = Volume(new_volume_id(), "big", 1 << 20, (CAP,), "", {"k": "v" * 6000})
    path = tmp_path / f"{volume.volume_id}.img"
    path.write_bytes(b"")
    file_identity.write_identity(path, file_identity.volume_identity(volume))
    assert file_identity.sidecar_path(path).exists()
    assert file_identity.read_identity(path) == file_identity.volume_identity(volume)
