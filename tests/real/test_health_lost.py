"""Volume health INACCESSIBLE for what a staged volume loses on the node, on real devices.

CSI v1.13's volume health INACCESSIBLE for what a staged volume loses on the node, each caused
for real on loop devices through a real gRPC server, seen with its reason, and seen to clear:

- LoopDeviceGone: a staged block volume's loop device detached from outside (`losetup -d`);
  the restage the message names (unpublish, unstage, stage, publish) clears it;
- NotMounted: a publish target unmounted from outside; unpublish and publish again clear it;
- Fenced: ControllerUnpublishVolume while the node still has the volume staged (Kubernetes'
  force-detach) revokes the node's hold. Until the node's teardown, or its fence pass, the node
  reports the staging Fenced and the controller reports the volume Fenced (the node's heartbeat
  still lists it under the revoked token); after the teardown the controller's clears, and a new
  publish and stage is healthy on both sides. A node frozen through the force-detach keeps the
  controller's report Fenced until it thaws and fences itself, and then it clears."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import in_process
from tests.real.test_health import _controller, _eventually, _health
from tests.support import helpers as h
from tests.support.processes import UNSHARE

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


def test_a_force_detached_volume_is_fenced_on_both_sides_until_torn_down(workdir: Path) -> None:
    # A fence pass an hour away: the node keeps the revoked staging until its teardown, as a
    # node does between the force-detach and its next lease check.
    with in_process(workdir, "drv", "--fence-interval", "3600") as client:
        cap = h.mount_cap("ext4")
        vol, staging, target = h.in_use(client, workdir, "a", cap)
        assert _health(client, vol.volume_id, target) == []
        assert _controller(client, vol.volume_id) == []

        # Kubernetes' force-detach: ControllerUnpublishVolume with the volume still staged.
        h.unpublish(client, vol.volume_id, "node-a")
        fenced = [(Status.INACCESSIBLE, "Fenced")]
        assert _health(client, vol.volume_id, target) == fenced
        assert _health(client, vol.volume_id) == fenced
        assert _controller(client, vol.volume_id) == fenced
        node_says = client.node.NodeGetVolumeHealth(
            pb.NodeGetVolumeHealthRequest(volume_id=vol.volume_id)
        ).volume_health.health_statuses[0]
        assert "unstage" in node_says.message, node_says.message
        ctl_says = client.controller.ControllerGetVolumeHealth(
            pb.ControllerGetVolumeHealthRequest(volume_id=vol.volume_id)
        ).volume_health.health_statuses[0]
        assert "node-a" in ctl_says.message, ctl_says.message

        # The fenced node's teardown: the node has nothing staged, the controller clears.
        h.node_unpublish(client, vol.volume_id, target)
        h.unstage(client, vol.volume_id, staging)
        h.expect_code(
            grpc.StatusCode.NOT_FOUND,
            client.node.NodeGetVolumeHealth,
            pb.NodeGetVolumeHealthRequest(volume_id=vol.volume_id),
        )
        _eventually(lambda: _controller(client, vol.volume_id) == [])

        # A new publish under a new token, staged again: healthy on both sides.
        ctx = h.publish(client, vol.volume_id, "node-a", cap)
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
        assert _health(client, vol.volume_id, target) == []
        assert _controller(client, vol.volume_id) == []
        h.release(client, vol.volume_id, staging, target)


def test_a_node_frozen_through_a_force_detach_is_fenced_until_it_fences_itself(
    spawn: Any, workdir: Path
) -> None:
    shared = ["--pool-scope", "shared", "--pool-dir", str(workdir / "pool")]
    _, ctrl = spawn("ctrl", "--mode", "controller", *shared, node_id="controller")
    node_flags = ["--mode", "node", *shared, "--fence-interval", "1", "--heartbeat-interval", "0.3"]
    a_proc, a = spawn("node-a", *node_flags, node_id="node-a", prefix=UNSHARE)
    cap = h.mount_cap("ext4")
    vol = h.create(ctrl, "a", cap, 32 * MiB)
    ctx = h.publish(ctrl, vol.volume_id, "node-a", cap)
    staging, target = workdir / "a" / "globalmount", workdir / "a" / "pod" / "mount"
    staging.mkdir(parents=True)
    h.stage(a, vol, staging, cap, ctx)
    h.node_publish(a, vol.volume_id, staging, target, cap, publish_context=ctx)
    assert _controller(ctrl, vol.volume_id) == []

    # node-a freezes, and Kubernetes force-detaches the volume from it.
    a_proc.kill(signal.SIGSTOP)
    try:
        h.unpublish(ctrl, vol.volume_id, "node-a")
        assert _controller(ctrl, vol.volume_id) == [(Status.INACCESSIBLE, "Fenced")]
    finally:
        a_proc.kill(signal.SIGCONT)
    # Thawed, node-a fences itself at its next fence pass and its heartbeat drops the volume.
    _eventually(lambda: _controller(ctrl, vol.volume_id) == [])
    assert "FENCING volume" in a_proc.log()
    h.expect_code(
        grpc.StatusCode.NOT_FOUND,
        a.node.NodeGetVolumeHealth,
        pb.NodeGetVolumeHealthRequest(volume_id=vol.volume_id),
    )
    h.delete(ctrl, vol.volume_id)
