"""The fake system layer's pool keeps a capacity that tests can fill.

The fake system layer's pool keeps a capacity, so the service tests can fill it: thin files
fit while empty, what is written counts, and growing or copying past it is NoSpace."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.system.base import NoSpace
from csi_hostpath.system.fake import fake_system

MiB = 1 << 20


def test_fake_pool_capacity(tmp_path: Path) -> None:
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    pool = fake_system(pool_dir, capacity_bytes=16 * MiB).pool
    source = pool_dir / "source"
    pool.create(source, 8 * MiB)
    pool.create(pool_dir / "thin", 16 * MiB)  # thin: fits while empty
    with pytest.raises(NoSpace):
        pool.create(pool_dir / "too-big", 17 * MiB)
    with pytest.raises(NoSpace):
        pool.grow(source, 17 * MiB)
    with open(source, "r+b") as handle:
        handle.write(b"x" * 8 * MiB)
    assert pool.free_bytes() == 8 * MiB
    pool.copy_sparse(source, pool_dir / "copy-1")
    assert pool.free_bytes() == 0
    with pytest.raises(NoSpace):
        pool.copy_sparse(source, pool_dir / "copy-2")
