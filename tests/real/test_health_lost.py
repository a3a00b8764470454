"""CSI v1.13's volume health INACCESSIBLE for what a staged volume loses on the node, each caused
for real on loop devices through a real gRPC server, seen with its reason, and seen to clear:

- LoopDeviceGone: a staged block volume's loop device detached from outside (`losetup -d`);
  the restage the message names (unpublish, unstage, stage, publish) clears it;
- NotMounted: a publish target unmounted from outside; unpublish and publish again clear it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from tests import helpers as h
from tests.conftest import in_process
from tests.real.test_health import _health

Status = pb.VolumeHealthErrorType
MiB = h.MiB


def _loop_of(target: Path) -> str:
    """The loop device a block volume's target is a bind mount of."""
    rdev = os.stat(target).st_rdev
    return "/dev/" + os.path.basename(
        os.readlink(f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}")
    )


def test_a_loop_device_gone_is_inaccessible_until_staged_again(workdir: Path) -> None:
    with in_process(workdir, "drv") as client:
        cap = h.block_cap()
        volume_id, staging, target = h.block_in_use(client, workdir, "b", 32 * MiB)
        assert _health(client, volume_id, target) == []
        subprocess.run(["losetup", "-d", _loop_of(target)], check=True)
        gone = [(Status.INACCESSIBLE, "LoopDeviceGone")]
        assert _health(client, volume_id, target) == gone
        assert _health(client, volume_id) == gone  # no path: its first target

        # The cure the message names: stage it again.
        h.node_unpublish(client, volume_id, target)
        h.unstage(client, volume_id, staging)
        ctx = h.publish(client, volume_id, "node-a", cap)
        vol = pb.Volume(volume_id=volume_id, capacity_bytes=32 * MiB)
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, volume_id, staging, target, cap, publish_context=ctx)
        assert _health(client, volume_id, target) == []
        h.release(client, volume_id, staging, target)


def test_a_target_unmounted_from_outside_is_inaccessible_until_published_again(
    workdir: Path,
) -> None:
    with in_process(workdir, "drv") as client:
        cap = h.mount_cap("ext4")
        vol, staging, target = h.in_use(client, workdir, "a", cap)
        assert _health(client, vol.volume_id, target) == []
        subprocess.run(["umount", str(target)], check=True)
        assert _health(client, vol.volume_id, target) == [(Status.INACCESSIBLE, "NotMounted")]
        assert _health(client, vol.volume_id) == []  # its staging is still mounted

        # The cure the message names: unpublish and publish it again.
        h.node_unpublish(client, vol.volume_id, target)
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
        assert h.mounted(target)
        assert _health(client, vol.volume_id, target) == []
        h.release(client, vol.volume_id, staging, target)
