"""The capacity rule's cache of thin files' allocations never counts more room than there is.

The capacity rule's cache of thin files' allocations (service/controller/allocations.py),
against a model pool: whatever files are written, trimmed, created and deleted, the room it
counts is never more than the pool's real room, except by what a file no entry accounts for took
meanwhile (which takes from any promise, cached or not); measured again, it is the real room."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from csi_hostpath.service.controller.allocations import Allocations

MiB = 1 << 20
POOL = 1000 * MiB


@dataclass
class ModelPool:
    files: dict[str, int] = field(default_factory=dict)  # key -> allocated bytes
    foreign: int = 0  # bytes of files no entry accounts for
    stats: int = 0

    def free(self) -> int:
        return POOL - sum(self.files.values()) - self.foreign

    def room(self) -> int:
        return self.free() + sum(self.files.values())

    def measure(self, key: str) -> int:
        self.stats += 1
        return self.files.get(key, 0)


def counted_room(cache: Allocations, pool: ModelPool, live: frozenset[str] = frozenset()) -> int:
    # Sizes past any allocation, so that what the cache counts is each file's allocation whole.
    written, free = cache.written(
        pool.free(),
        lambda: [(k, POOL) for k in pool.files],
        lambda k: POOL if k in pool.files else None,
        live,
    )
    return free + written


def test_a_write_lowers_the_room_counted() -> None:
    pool = ModelPool({"a": 10 * MiB})
    cache = Allocations(pool.measure)
    assert counted_room(cache, pool) == pool.room()
    pool.files["a"] += 30 * MiB  # free falls, the cached allocation does not rise
    assert counted_room(cache, pool) == pool.room() - 30 * MiB
    cache.drop()
    assert counted_room(cache, pool) == pool.room()


def test_an_allocation_past_the_size_is_counted_up_to_the_size() -> None:
    # Filesystem metadata blocks may allocate past a volume's size: that promises nothing more.
    pool = ModelPool({"a": 64 * MiB + 4096})
    cache = Allocations(pool.measure)
    written, _ = cache.written(pool.free(), lambda: [("a", 64 * MiB)], lambda k: 64 * MiB)
    assert written == 64 * MiB


def test_a_trim_does_not_raise_the_room_counted() -> None:
    pool = ModelPool({"a": 40 * MiB})
    cache = Allocations(pool.measure)
    assert counted_room(cache, pool) == pool.room()
    pool.files["a"] -= 30 * MiB  # free rises, the cached allocation does not fall
    assert counted_room(cache, pool) == pool.room()
    pool.foreign += 20 * MiB  # and what someone else's file takes meanwhile still counts
    assert counted_room(cache, pool) <= pool.room() + 20 * MiB


def test_created_changed_and_deleted_volumes_are_measured_alone_and_exactly() -> None:
    pool = ModelPool({f"v{n}": MiB for n in range(50)})
    cache = Allocations(pool.measure)
    counted_room(cache, pool)
    pool.stats = 0
    pool.files["clone"] = 40 * MiB  # a clone's copy took its data from free space
    cache.changed("clone")
    assert counted_room(cache, pool) == pool.room()
    pool.files["v1"] += 5 * MiB  # an expansion: measured again because the service says so
    cache.changed("v1")
    assert counted_room(cache, pool) == pool.room()
    del pool.files["v2"]
    cache.changed("v2")
    assert counted_room(cache, pool) == pool.room()
    assert pool.stats == 2  # the clone and v1; nothing for the 48 others, nothing for v2


def test_live_entries_are_measured_at_every_use() -> None:
    pool = ModelPool({"held": 0, "idle": 0})
    cache = Allocations(pool.measure)
    counted_room(cache, pool)
    pool.files["held"] += 20 * MiB
    assert counted_room(cache, pool, frozenset({"held"})) == pool.room()
    pool.files["held"] -= 15 * MiB
    assert counted_room(cache, pool, frozenset({"held"})) == pool.room()


def test_a_copy_under_way_is_counted_and_everything_measured_after_it() -> None:
    pool = ModelPool({"src": 30 * MiB})
    cache = Allocations(pool.measure)
    counted_room(cache, pool)
    with cache.copying(30 * MiB):
        pool.files["src"] -= 30 * MiB  # a trim while the copy runs...
        pool.foreign += 30 * MiB  # ...which the copy's bytes would otherwise hide
        assert counted_room(cache, pool) <= pool.room()
    pool.stats = 0
    assert counted_room(cache, pool) == pool.room()
    assert pool.stats == 1


def test_everything_is_measured_again_after_max_age() -> None:
    now = [0.0]
    pool = ModelPool({"a": 0})
    cache = Allocations(pool.measure, clock=lambda: now[0], max_age=30)
    counted_room(cache, pool)
    pool.files["a"] = 10 * MiB
    assert counted_room(cache, pool) < pool.room()
    now[0] = 31
    assert counted_room(cache, pool) == pool.room()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "trim", "create", "delete", "foreign", "unforeign", "use"]),
        st.integers(0, 3),
        st.integers(0, 50),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(st.integers(0, 50), min_size=1, max_size=4), ops=OPS)
def test_the_room_counted_never_exceeds_the_real_room(
    start: list[int], ops: list[tuple[str, int, int, bool]]
) -> None:
    pool = ModelPool({f"v{n}": mib * MiB for n, mib in enumerate(start)})
    cache = Allocations(pool.measure)
    counted_room(cache, pool)
    foreign_since = 0  # what untracked files took since everything was last measured
    for op, n, mib, live in ops:
        key, nbytes = f"v{n}", mib * MiB
        if op == "write" and key in pool.files:
            pool.files[key] += min(nbytes, pool.free())
        elif op == "trim" and key in pool.files:
            pool.files[key] -= min(nbytes, pool.files[key])
        elif op == "create" and key not in pool.files:
            pool.files[key] = min(nbytes, pool.free())
            cache.changed(key)
        elif op == "delete" and key in pool.files:
            del pool.files[key]
            cache.changed(key)
        elif op == "foreign":
            taken = min(nbytes, pool.free())
            pool.foreign += taken
            foreign_since += taken
        elif op == "unforeign":
            pool.foreign -= min(nbytes, pool.foreign)
        elif op == "use":
            room = counted_room(cache, pool, frozenset(pool.files) if live else frozenset())
            assert room <= pool.room() + foreign_since
    cache.drop()
    assert counted_room(cache, pool) == pool.room()
