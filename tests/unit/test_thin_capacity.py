"""Honest thin capacity and topology in the spec's order, over a real gRPC server.

The fake system layer pretends only the pool's size (64 MiB); files, sqlite and the server are
real. The real-pool and trim tests are in tests/real/test_thin_capacity_real.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi_hostpath import cli
from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, in_process
from tests.support import helpers as h

C = grpc.StatusCode
MiB = 1 << 20
KEY = "topology.loop.hostpath.csi.dev/node"


def _capacity(client: Client) -> pb.GetCapacityResponse:
    reply: pb.GetCapacityResponse = client.controller.GetCapacity(pb.GetCapacityRequest())
    return reply


def test_sparse_volumes_never_promise_the_same_bytes_twice(fake_driver: Client) -> None:
    """Failed on the old code: each 24 MiB sparse file allocated nothing, so the pool's free
    space never fell and a third (and fourth...) volume was accepted into a 64 MiB pool."""
    cap = h.mount_cap("ext4")
    before = _capacity(fake_driver)
    assert before.maximum_volume_size.value == before.available_capacity
    h.create(fake_driver, "a", cap, 24 * MiB)
    h.create(fake_driver, "b", cap, 24 * MiB)
    after = _capacity(fake_driver)
    assert abs((before.available_capacity - after.available_capacity) - 48 * MiB) < MiB
    assert after.maximum_volume_size.value == after.available_capacity
    err = h.expect_code(C.RESOURCE_EXHAUSTED, h.create, fake_driver, "c", cap, 24 * MiB)
    assert "--overcommit-ratio" in (err.details() or "")
    # Deleting a volume gives its promise back.
    volume_id = fake_driver.controller.ListVolumes(pb.ListVolumesRequest()).entries[0]
    fake_driver.controller.DeleteVolume(
        pb.DeleteVolumeRequest(volume_id=volume_id.volume.volume_id)
    )
    h.create(fake_driver, "c", cap, 24 * MiB)


@pytest.fixture
def overcommitted(workdir: Path) -> Iterator[Client]:
    from csi_hostpath.system.fake import fake_system

    with in_process(
        workdir,
        "oc",
        "--overcommit-ratio",
        "2",
        system=lambda pool: fake_system(pool, capacity_bytes=64 << 20),
    ) as client:
        yield client


def test_an_overcommit_ratio_promises_that_many_times_the_room(
    fake_driver: Client, overcommitted: Client
) -> None:
    plain = _capacity(fake_driver).available_capacity
    doubled = _capacity(overcommitted).available_capacity
    assert abs(doubled - 2 * plain) < MiB
    cap = h.mount_cap("ext4")
    # 100 MiB of volumes in a 64 MiB pool: past its room, within twice the room.
    h.create(overcommitted, "big", cap, 50 * MiB)
    h.create(overcommitted, "big2", cap, 50 * MiB)
    h.expect_code(C.RESOURCE_EXHAUSTED, h.create, overcommitted, "more", cap, 20 * MiB)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_the_overcommit_ratio_flag_is_finite_and_positive(value: str) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(
            ["serve", "--endpoint", "unix:///tmp/x.sock", f"--overcommit-ratio={value}"]
        )


def _topology(nodes: list[str]) -> list[pb.Topology]:
    return [pb.Topology(segments={KEY: n}) for n in nodes]


def _create_for(client: Client, name: str, requisite: list[str], preferred: list[str]) -> pb.Volume:
    request = pb.CreateVolumeRequest(
        name=name,
        volume_capabilities=[h.mount_cap("ext4")],
        capacity_range=pb.CapacityRange(required_bytes=4 * MiB),
        accessibility_requirements=pb.TopologyRequirement(
            requisite=_topology(requisite), preferred=_topology(preferred)
        ),
    )
    reply: pb.CreateVolumeResponse = client.controller.CreateVolume(request)
    return reply.volume


def test_preferred_elsewhere_without_requisite_is_resource_exhausted(fake_driver: Client) -> None:
    """Failed on the old code: with no requisite, the preferred list was never read, so a
    volume the CO preferred on node-b was made on node-a (fake_driver's node) and its pod,
    scheduled on node-b, could never mount it."""
    err = h.expect_code(C.RESOURCE_EXHAUSTED, _create_for, fake_driver, "v", [], ["node-b"])
    assert "node-a" in (err.details() or "") and "node-b" in (err.details() or "")


def test_preferred_then_requisite_in_order(fake_driver: Client) -> None:
    # preferred names node-b first (not served here), then node-a: node-a is served.
    vol = _create_for(fake_driver, "p", ["node-b", "node-a"], ["node-b", "node-a"])
    assert [dict(t.segments) for t in vol.accessible_topology] == [{KEY: "node-a"}]
    # Only requisite names this node.
    vol = _create_for(fake_driver, "r", ["node-c", "node-a"], [])
    assert [dict(t.segments) for t in vol.accessible_topology] == [{KEY: "node-a"}]
    # Neither list names it.
    h.expect_code(C.RESOURCE_EXHAUSTED, _create_for, fake_driver, "x", ["node-c"], ["node-c"])
    # No requirement at all: the volume is this node's, and says so.
    plain = h.create(fake_driver, "plain", h.mount_cap("ext4"), 4 * MiB)
    assert [dict(t.segments) for t in plain.accessible_topology] == [{KEY: "node-a"}]


def test_an_expansion_is_promised_like_a_new_volume(fake_driver: Client) -> None:
    """Failed on the old code: growth was checked against the free space alone, so a 24 MiB
    volume beside another 24 MiB one grew to 40 MiB in a 64 MiB pool (64 MiB promised in all,
    past the pool's room); now it is OUT_OF_RANGE, as the spec has for an unsupported size."""
    cap = h.mount_cap("ext4")
    a = h.create(fake_driver, "a", cap, 24 * MiB)
    h.create(fake_driver, "b", cap, 24 * MiB)

    def expand(required: int) -> pb.ControllerExpandVolumeResponse:
        reply: pb.ControllerExpandVolumeResponse = fake_driver.controller.ControllerExpandVolume(
            pb.ControllerExpandVolumeRequest(
                volume_id=a.volume_id, capacity_range=pb.CapacityRange(required_bytes=required)
            )
        )
        return reply

    err = h.expect_code(C.OUT_OF_RANGE, expand, 40 * MiB)
    assert "--overcommit-ratio" in (err.details() or "")
    left = _capacity(fake_driver).available_capacity
    assert expand(24 * MiB + left // MiB * MiB).capacity_bytes == 24 * MiB + left // MiB * MiB
    assert _capacity(fake_driver).available_capacity < MiB
