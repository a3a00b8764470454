from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.daemon.server import Driver
from tests.conftest import Client
from tests.unit.builders import quiet_fake_driver


@pytest.fixture
def drv(tmp_path: Path) -> Iterator[tuple[Driver, Client]]:
    """A quiet driver on the fake system layer with a 256 MiB pool (tests/unit/builders.py),
    and its client: only the RPCs and the passes a test runs itself write."""
    with quiet_fake_driver(tmp_path, capacity_bytes=256 << 20) as pair:
        yield pair
