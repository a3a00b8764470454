"""A volume whose filesystem counted failed writes is abnormal, on the fake kernel.

On the fake kernel (no root): a volume whose filesystem counted failed writes
is abnormal in NodeGetVolumeStats at once, and in ControllerGetVolume and ListVolumes after the
node's next fence pass reports it in its heartbeat; a volume without errors stays normal."""

from __future__ import annotations

import time
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.model import NodeStaging
from csi_hostpath.store.db import Store
from csi_hostpath.system.base import System
from csi_hostpath.system.fake import fake_system
from csi_hostpath.system.fake.fake_kernel import FakeKernel
from tests.conftest import in_process
from tests.support import helpers as h


def test_counted_write_errors_reach_both_health_rpcs(tmp_path: Path) -> None:
    kernel = FakeKernel()

    def system(pool_dir: Path) -> System:
        return fake_system(pool_dir, kernel=kernel)

    with in_process(tmp_path, "f", "--fence-interval", "0.2", system=system) as client:
        cap = h.mount_cap("ext4")
        sick, _, sick_target = h.in_use(client, tmp_path, "sick", cap)
        well, _, well_target = h.in_use(client, tmp_path, "well", cap)
        device = next(s.device for s in _stagings(tmp_path) if s.volume_id == sick.volume_id)
        found = kernel.device(device)
        assert found is not None
        kernel.fs_errors[found.index] = 3  # a thin pool ran out under it

        def node(volume_id: str, target: Path) -> pb.VolumeCondition:
            request = pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=str(target))
            reply: pb.NodeGetVolumeStatsResponse = client.node.NodeGetVolumeStats(request)
            return reply.volume_condition

        def controller(volume_id: str) -> pb.VolumeCondition:
            request = pb.ControllerGetVolumeRequest(volume_id=volume_id)
            reply: pb.ControllerGetVolumeResponse = client.controller.ControllerGetVolume(request)
            return reply.status.volume_condition

        assert node(sick.volume_id, sick_target).abnormal
        assert "I/O errors" in node(sick.volume_id, sick_target).message
        deadline = time.monotonic() + 10
        while not controller(sick.volume_id).abnormal and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "I/O errors" in controller(sick.volume_id).message
        assert "node-a" in controller(sick.volume_id).message
        listed = {
            e.volume.volume_id: e.status.volume_condition
            for e in client.controller.ListVolumes(pb.ListVolumesRequest()).entries
        }
        assert listed[sick.volume_id].abnormal and not listed[well.volume_id].abnormal
        assert not node(well.volume_id, well_target).abnormal
        assert not controller(well.volume_id).abnormal


def _stagings(workdir: Path) -> list[NodeStaging]:
    store = Store(workdir / "f-state" / "state.db")
    try:
        return list(store.stagings())
    finally:
        store.close()
