"""Expansion on real devices along the paths where the node could see an old size.

Expansion on the real driver along the paths where NodeExpandVolume could see an old size: a
volume restored or cloned into a larger claim and then expanded, and a pool file smaller than
its record (a pool restored from an older copy) that ControllerExpandVolume must grow rather
than call done. A node asked for more than its device holds, and a node step during a
snapshot's freeze, answer a retriable code: asking for less would not help."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.real.test_data_features import _from_source, _snapshot
from tests.real.test_freeze_real import _staged, always_thawed, held_driver, snapshot
from tests.support import helpers as h
from tests.support.helpers import Mounted

C = grpc.StatusCode
MiB = h.MiB


@contextmanager
def mounted(
    driver: Client, workdir: Path, vol: pb.Volume, cap: pb.VolumeCapability, tag: str
) -> Iterator[Mounted]:
    m = Mounted(driver, workdir, vol, cap, tag)
    try:
        yield m
    finally:
        m.close()


def _expand(driver: Client, volume_id: str, size: int) -> pb.ControllerExpandVolumeResponse:
    reply: pb.ControllerExpandVolumeResponse = driver.controller.ControllerExpandVolume(
        pb.ControllerExpandVolumeRequest(
            volume_id=volume_id, capacity_range=pb.CapacityRange(required_bytes=size)
        )
    )
    return reply


def _node_expand(driver: Client, m: Mounted, size: int) -> pb.NodeExpandVolumeResponse:
    reply: pb.NodeExpandVolumeResponse = driver.node.NodeExpandVolume(
        pb.NodeExpandVolumeRequest(
            volume_id=m.vol.volume_id,
            volume_path=str(m.target),
            capacity_range=pb.CapacityRange(required_bytes=size),
        )
    )
    return reply


def _device_size(m: Mounted) -> int:
    with open(m.target, "rb") as f:
        return f.seek(0, os.SEEK_END)


@pytest.mark.parametrize("source", ["snapshot", "volume"])
def test_a_copy_into_a_larger_claim_expands_on_the_node(
    driver: Client, workdir: Path, source: str
) -> None:
    cap = h.block_cap()
    origin = h.create(driver, f"origin-{source}", cap, 32 * MiB)
    if source == "snapshot":
        snap = _snapshot(driver, origin.volume_id, f"snap-{source}")
        copy = _from_source(driver, f"copy-{source}", cap, 64 * MiB, snapshot_id=snap.snapshot_id)
    else:
        copy = _from_source(driver, f"copy-{source}", cap, 64 * MiB, volume_id=origin.volume_id)
    assert copy.capacity_bytes == 64 * MiB
    with mounted(driver, workdir, copy, cap, f"copy-{source}") as m:
        assert _device_size(m) == 64 * MiB  # the device holds what CreateVolume reported
        grown = _expand(driver, copy.volume_id, 128 * MiB)
        assert grown.capacity_bytes == 128 * MiB and grown.node_expansion_required
        assert _node_expand(driver, m, 128 * MiB).capacity_bytes == 128 * MiB
        assert _device_size(m) == 128 * MiB


def test_expand_grows_a_pool_file_smaller_than_its_record(driver: Client, workdir: Path) -> None:
    cap = h.block_cap()
    vol = h.create(driver, "stale", cap, 32 * MiB)
    assert _expand(driver, vol.volume_id, 64 * MiB).capacity_bytes == 64 * MiB
    # The pool file back at its old size while the record keeps the grown one (the pool
    # restored from a copy taken before the expansion): the record is no proof of growth.
    backing = workdir / "drv-state" / "pool" / "volumes" / f"{vol.volume_id}.img"
    os.truncate(backing, 32 * MiB)
    with mounted(driver, workdir, vol, cap, "stale") as m:
        grown = _expand(driver, vol.volume_id, 64 * MiB)
        assert grown.capacity_bytes == 64 * MiB and grown.node_expansion_required
        assert backing.stat().st_size == 64 * MiB
        assert _node_expand(driver, m, 64 * MiB).capacity_bytes == 64 * MiB
        assert _device_size(m) == 64 * MiB


def test_node_asked_past_its_device_answers_a_retriable_code(driver: Client, workdir: Path) -> None:
    cap = h.block_cap()
    vol = h.create(driver, "ahead", cap, 32 * MiB)
    with mounted(driver, workdir, vol, cap, "ahead") as m:
        # OUT_OF_RANGE or INVALID_ARGUMENT would mark the claim NodeResizeInfeasible (KEP-1790),
        # though asking for less is no fix: the controller's growth has not reached the node.
        err = h.expect_code(C.ABORTED, _node_expand, driver, m, 64 * MiB)
        assert "controller" in (err.details() or "")
        _expand(driver, vol.volume_id, 64 * MiB)
        assert _node_expand(driver, m, 64 * MiB).capacity_bytes == 64 * MiB


def test_node_expand_during_a_snapshot_freeze_is_aborted(workdir: Path) -> None:
    # The snapshot's copy is held with the filesystem frozen: the expansion must answer a
    # retriable code at once, never wait on the freeze nor call the request infeasible.
    with held_driver(workdir) as (client, pool):
        vol, staging = _staged(client, workdir, "frozen")
        _expand(client, vol.volume_id, 64 * MiB)
        with always_thawed(staging):
            caller = threading.Thread(target=lambda: snapshot(client, vol.volume_id, "s"))
            caller.start()
            try:
                assert pool.entered.wait(20)
                # The controller's own step waits for the snapshot the same way.
                h.expect_code(C.ABORTED, _expand, client, vol.volume_id, 96 * MiB)
                request = pb.NodeExpandVolumeRequest(
                    volume_id=vol.volume_id,
                    volume_path=str(staging),
                    capacity_range=pb.CapacityRange(required_bytes=64 * MiB),
                )
                err = h.expect_code(C.ABORTED, client.node.NodeExpandVolume, request, timeout=10)
                assert "snapshot freeze" in (err.details() or "")
            finally:
                pool.release.set()
                caller.join(30)
