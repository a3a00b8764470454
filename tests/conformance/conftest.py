"""Fixtures for the csi-sanity-equivalent tests: a real `csi-hostpath serve` process per test
(through the shared `spawn` fixture) and csi-sanity's per-test directories and cleanup."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.sanity import Sanity
from tests.conformance.sanity_config import SanityConfig
from tests.conftest import LAYERS, Client, in_process

StartSanity = Callable[..., Sanity]


@pytest.fixture(params=LAYERS)
def start_sanity(
    request: pytest.FixtureRequest, spawn: Any, workdir: Path
) -> Iterator[StartSanity]:
    """Start a driver (extra CLI arguments allowed) and hand back csi-sanity's test context.

    Each case runs twice: `[real]`, a `csi-hostpath serve` process on loop devices and mounts
    (marked real), and `[fake]`, the same CLI arguments served in this process on the fake system
    layer (no root: `make unit`).

    As csi-sanity does before each test, the target (parent) and staging directories are made
    fresh, the directory itself only; afterwards every resource the test made is cleaned up
    through the driver, newest first, and a failing cleanup fails the test (csi-sanity's
    AfterEach). The shared fixtures then stop the driver and clear any mount or loop device
    left below the work directory, whatever happened."""
    servers = ExitStack()

    def _serve(*extra: str) -> Client:
        if request.param == "real":
            _, spawned = spawn("sanity", *extra)
            assert isinstance(spawned, Client)
            return spawned
        from csi_hostpath.system.fake import FakeKernel, fake_system

        kernel = FakeKernel()
        return servers.enter_context(
            in_process(
                workdir,
                "sanity",
                *extra,
                system=lambda pool: fake_system(pool, kernel=kernel),
                kernel=kernel,
            )
        )

    made: list[Sanity] = []
    # csi-sanity's volumes are 10 GiB and never written; five of them (the ListSnapshots paging
    # case) promise 50 GiB, more than a shared test machine's disk may have free at the default
    # ratio 1.0. The real csi-sanity run overcommits the same way (test_csi_sanity.py ALL_FLAGS);
    # a case's own --overcommit-ratio comes later and wins.
    thin = ("--overcommit-ratio", "50")

    def _start(*extra: str, config: SanityConfig | None = None) -> Sanity:
        assert not made, "one driver per test, as csi-sanity has one endpoint"
        client = _serve(*thin, *extra)
        target, staging = workdir / "csi-mount", workdir / "csi-staging"
        target.mkdir()
        staging.mkdir()
        ctx = Sanity(client, config or SanityConfig(), target, staging)
        made.append(ctx)
        return ctx

    with servers:
        yield _start
        for ctx in made:
            try:
                ctx.cleanup()
            finally:
                # csi-sanity removes both directories and does not fail on what is left in
                # them; whatever is mounted there is the shared fixtures' to clear.
                for path in (ctx.target_path, ctx.staging_path):
                    with contextlib.suppress(OSError):
                        path.rmdir()


@pytest.fixture
def sanity(start_sanity: StartSanity) -> Sanity:
    """The driver with its default flags, as `make run` serves it (overcommitted, above), under
    csi-sanity defaults."""
    return start_sanity()
