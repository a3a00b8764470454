"""NodeGetInfo's volume limit and ControllerPublish past it, over gRPC on the fake layer.

NodeGetInfo's max_volumes_per_node over a real gRPC server on the fake system layer, whose
kernel a test can fill with other nodes' loop devices; and ControllerPublishVolume past the node's
limit, which must be exactly RESOURCE_EXHAUSTED: the code the kubelet reads (from the
VolumeAttachment's error) as the cue to ask NodeGetInfo again and update CSINode at once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.naming import loop_tag
from csi_hostpath.system.base import LoopDevice
from csi_hostpath.system.fake import FakeKernel, FakeLoop, fake_system
from tests.conftest import Client, in_process
from tests.support import helpers as h

C = grpc.StatusCode
CAP = h.mount_cap("ext4")
CEILING = 6  # the fake kernel's most loop devices


@contextmanager
def fake_node(workdir: Path, *extra: str) -> Iterator[tuple[Client, FakeKernel]]:
    kernel = FakeKernel(loop_ceiling=CEILING)
    system = lambda pool: fake_system(pool, kernel=kernel)  # noqa: E731
    with in_process(workdir, "n", *extra, system=system, kernel=kernel) as client:
        yield client, kernel


def limit(client: Client) -> int:
    value = client.node.NodeGetInfo(pb.NodeGetInfoRequest()).max_volumes_per_node
    assert isinstance(value, int)
    return value


def other_node_takes(kernel: FakeKernel, workdir: Path, count: int) -> list[LoopDevice]:
    loop = FakeLoop(kernel)
    taken = []
    for i in range(count):
        backing = workdir / f"node-b-{i}.img"
        backing.write_bytes(bytes(4096))
        taken.append(loop.attach(backing, loop_tag("node-b", f"vol-{i:032x}")))
    return taken


def test_other_nodes_devices_lower_the_limit_and_own_volumes_do_not(workdir: Path) -> None:
    with fake_node(workdir) as (client, kernel):
        assert limit(client) == CEILING
        taken = other_node_takes(kernel, workdir, 2)
        assert limit(client) == CEILING - 2

        vol = h.create(client, "mine", CAP, 32 * h.MiB)
        ctx = h.publish(client, vol.volume_id, "node-a", CAP)
        staging = workdir / "st"
        staging.mkdir()
        h.stage(client, vol, staging, CAP, ctx)
        # Its device is one of the volumes the node holds: counted once, not as one used up.
        assert limit(client) == CEILING - 2

        for device in taken:
            FakeLoop(kernel).detach(device)
        assert limit(client) == CEILING
        h.unstage(client, vol.volume_id, staging)


def test_a_node_with_no_device_left_says_one_not_zero(workdir: Path) -> None:
    with fake_node(workdir) as (client, kernel):
        other_node_takes(kernel, workdir, CEILING)
        assert limit(client) == 1  # 0 would tell the kubelet "no limit"


def test_the_flag_caps_the_kernels_limit(workdir: Path) -> None:
    with fake_node(workdir, "--max-volumes-per-node", "4") as (client, kernel):
        assert limit(client) == 4
        other_node_takes(kernel, workdir, 3)
        assert limit(client) == CEILING - 3


def test_controller_publish_past_the_limit_is_resource_exhausted(workdir: Path) -> None:
    with fake_node(workdir, "--max-volumes-per-node", "2") as (client, _):
        assert limit(client) == 2
        volumes = [h.create(client, f"v{i}", CAP, 32 * h.MiB) for i in range(3)]
        for vol in volumes[:2]:
            h.publish(client, vol.volume_id, "node-a", CAP)
        err = h.expect_code(
            C.RESOURCE_EXHAUSTED, h.publish, client, volumes[2].volume_id, "node-a", CAP
        )
        details = err.details() or ""
        assert "already holds 2 volumes" in details and "unpublish one of them" in details
        # The held ones repeat fine: the limit counts volumes, not calls.
        h.publish(client, volumes[0].volume_id, "node-a", CAP)
        # One given back makes room.
        h.unpublish(client, volumes[1].volume_id, "node-a")
        h.publish(client, volumes[2].volume_id, "node-a", CAP)
