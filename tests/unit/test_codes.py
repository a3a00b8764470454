"""The spec's codes on the fake layer: a full disk is RESOURCE_EXHAUSTED, not INTERNAL.

The spec's codes, and errors that name the next step: a full disk (ENOSPC, EDQUOT, sqlite's
"database or disk is full") is RESOURCE_EXHAUSTED, not INTERNAL; other OS errors stay INTERNAL;
ControllerExpandVolume past what the pool can hold is OUT_OF_RANGE ("Unsupported capacity" in CSI
spec.md's ControllerExpandVolume errors table). The same on a real pool, the pool's reserve and a
corrupt state.db: tests/real/test_codes_real.py."""

from __future__ import annotations

import errno
import sqlite3

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.api.status import status_of
from tests.conftest import Client
from tests.support import helpers as h

MiB = 1 << 20
C = grpc.StatusCode


@pytest.mark.parametrize(
    "exc",
    [
        sqlite3.OperationalError("database or disk is full"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
    ids=["sqlite-full", "enospc", "edquot"],
)
def test_disk_full_is_resource_exhausted(exc: Exception) -> None:
    assert status_of(exc) == C.RESOURCE_EXHAUSTED


def test_other_oserrors_stay_internal() -> None:
    assert status_of(OSError(errno.EIO, "I/O error")) == C.INTERNAL


def test_expand_past_the_pool_is_out_of_range(fake_driver: Client) -> None:
    vol = h.create(fake_driver, "e", h.block_cap(), 8 * MiB)
    req = pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume_id, capacity_range=pb.CapacityRange(required_bytes=1 << 30)
    )
    h.expect_code(C.OUT_OF_RANGE, fake_driver.controller.ControllerExpandVolume, req)
