"""The fuzz's driver: one per system layer for every test in this folder, its seed rebuilt
before each test, and checked after it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LAYERS, scratch_parent
from tests.e2e.bad_input.fuzz_target import (
    Target,
    fake_target,
    inside_is_tidy,
    probe_ok,
    real_target,
    reseed,
)
from tests.support.kernel import cleanup_kernel


# The fake layer runs in `make unit` (no root, a minute for everything): fewer examples per RPC
# there; the real layer keeps the full count.
@pytest.fixture(scope="package", params=LAYERS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    real = request.param == "real"
    root = Path(tempfile.mkdtemp(prefix="csihp-test-", dir=scratch_parent(real)))
    try:
        with (real_target if real else fake_target)(root) as t:
            t.seed.fuzz_root.mkdir()
            reseed(t.client, t.seed)
            t.mounts_outside = t.mounts()
            yield t
    finally:
        cleanup_kernel(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh(target: Target) -> Iterator[Target]:
    """The seed state rebuilt before each test (a test's examples may well undo it); after the
    test, the driver still answers Probe and wrote only where it may."""
    assert target.alive(), target.log()
    reseed(target.client, target.seed)
    yield target
    probe_ok(target)
    inside_is_tidy(target)
