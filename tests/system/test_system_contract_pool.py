"""The system layer's pool contract (create, grow, remove, sparse copy), on the fake and the real.

Whatever passes here on "fake" must pass on "real": that is what lets the service tests trust the
fake. Assertions only the real kernel can make are guarded by ``env.real``.
"""

from __future__ import annotations

import os

import pytest

from csi_hostpath.system.base import NoSpace
from csi_hostpath.system.extents import data_extents

from .conftest import Env
from .system_limits import GiB, MiB


def test_pool_create_grow_remove(env: Env) -> None:
    pool = env.system.pool
    path = env.pool_dir / "vol"
    assert pool.size(path) is None
    assert pool.allocated(path) == 0

    pool.create(path, 64 * MiB)
    assert pool.size(path) == 64 * MiB
    assert pool.allocated(path) < MiB  # sparse
    pool.create(path, 64 * MiB)  # same size again: nothing to do
    with pytest.raises(FileExistsError):
        pool.create(path, 32 * MiB)

    pool.grow(path, 128 * MiB)
    assert pool.size(path) == 128 * MiB
    pool.grow(path, 16 * MiB)  # never shrinks
    assert pool.size(path) == 128 * MiB

    pool.remove(path)
    assert pool.size(path) is None
    assert pool.allocated(path) == 0
    pool.remove(path)  # already gone: fine
    assert sorted(os.listdir(env.pool_dir)) == []  # no temporary left behind


def test_pool_grow_missing_file(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.pool.grow(env.pool_dir / "missing", MiB)


def test_pool_file_too_big_is_no_space(env: Env) -> None:
    # Beyond ext4's largest file on the real pool, beyond the fake's capacity on the fake.
    with pytest.raises(NoSpace):
        env.system.pool.create(env.pool_dir / "huge", 1 << 60)
    assert os.listdir(env.pool_dir) == []


def test_pool_free_bytes(env: Env) -> None:
    assert env.system.pool.free_bytes() > 0


def test_copy_sparse_keeps_holes_and_data(env: Env) -> None:
    pool = env.system.pool
    source = env.pool_dir / "source"
    pool.create(source, GiB)
    chunks = {0: b"a", 300 * MiB: b"b", GiB - 2 * MiB: b"c"}
    lengths = {0: MiB, 300 * MiB: MiB, GiB - 2 * MiB: 2 * MiB}
    with open(source, "r+b") as handle:
        for offset, byte in chunks.items():
            handle.seek(offset)
            handle.write(byte * lengths[offset])

    dest = env.pool_dir / "copy"
    pool.create(dest, MiB)  # an older copy is replaced
    pool.copy_sparse(source, dest)

    assert pool.size(dest) == GiB
    assert 4 * MiB <= pool.allocated(dest) <= 5 * MiB
    # Same data where the source has data, and holes (reading as zeros) everywhere else: compare
    # the data extents and their bytes instead of reading a GiB of holes, which takes tens of
    # seconds on a busy machine and says nothing more.
    assert data_extents(dest) == data_extents(source)
    with open(source, "rb") as left, open(dest, "rb") as right:
        for offset, length in data_extents(source):
            left.seek(offset)
            right.seek(offset)
            assert left.read(length) == right.read(length)
    assert sorted(os.listdir(env.pool_dir)) == ["copy", "source"]


def test_copy_sparse_missing_source_leaves_nothing(env: Env) -> None:
    with pytest.raises(FileNotFoundError):
        env.system.pool.copy_sparse(env.pool_dir / "missing", env.pool_dir / "copy")
    assert os.listdir(env.pool_dir) == []
