"""Fixtures of the sidecar tests: every process started here is ended when the test ends,
failing or not."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.sidecars.procs import Sidecar


@pytest.fixture
def sidecar(workdir: Path) -> Iterator[Callable[..., Sidecar]]:
    """Start sidecar subcommands: sidecar("registrar", "--csi-address=...", ...)."""
    started: list[Sidecar] = []

    def _start(*args: str) -> Sidecar:
        proc = Sidecar(list(args), workdir / f"{args[0]}-{len(started)}.log").start()
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        proc.signal(signal.SIGCONT)
        proc.stop()
