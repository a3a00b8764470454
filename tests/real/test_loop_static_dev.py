"""Loop devices where /dev is a static copy, as on a kind node: the driver makes the nodes.

Loop devices where /dev is a static copy: a kind node is a privileged container whose /dev is a
tmpfs of the host's device nodes as they were when it started, and no udev runs in it. A loop
device the kernel adds later (LOOP_CTL_GET_FREE adds one whenever none is free) gets no
/dev/loopN there, and one that existed but had no node copied has none either. The driver makes
the node itself, from the numbers the kernel gives in sysfs; a node whose numbers are not the
kernel's is refused, never used; a kernel without loop-control is an error that says what to do.

Each case runs in a mount namespace whose /dev is such a tmpfs with loop-control, /dev/loop0 and
/dev/loop1 only (tests/support/static_dev.py), and attaches more devices than that. To the driver
both kinds of missing node are one case: sysfs has the device, /dev has no node. (Forcing the kernel
to add devices would take every free one on a kernel other tests share, hundreds at times.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc

from csi_hostpath.core.naming import loop_tag
from tests.support import helpers as h
from tests.support.kernel import autoclear_pending, held_loop, loops_backed_under
from tests.support.processes import mount_points
from tests.support.static_dev import attach_command, loop_indices, static_dev

REPO = Path(__file__).resolve().parents[2]
# More than the two loop nodes the namespace's /dev starts with.
ATTACHES = 6
STAGES = 4


def test_attach_makes_the_nodes_a_static_dev_lacks(workdir: Path) -> None:
    count = ATTACHES
    pool = workdir / "pool"
    pool.mkdir()
    out = subprocess.run(
        attach_command(pool, f"csihp-test-static-{os.getpid()}-", count),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["error"] is None, report["error"]
    assert len(report["attached"]) == count
    for path, node in report["nodes"].items():
        assert node == {
            "block": True,
            "rdev_is_the_kernels": True,
            "like_loop0": True,
            "found": True,
        }, path
    # The child detached each device it attached; none is left bound.
    assert not [d for d in loops_backed_under(workdir) if not autoclear_pending(d)]


def _stage_all(client: Any, workdir: Path, count: int) -> list[tuple[str, Path]]:
    points = [workdir / f"staging-{i}" for i in range(count)]
    return [(h.staged(client, p, f"static-{i}").volume_id, p) for i, p in enumerate(points)]


def test_node_stage_and_a_block_publish_in_a_static_dev(spawn: Any, workdir: Path) -> None:
    count = STAGES
    handle, client = spawn("drv", prefix=static_dev())
    assert handle.proc is not None
    pid = handle.proc.pid

    staged = _stage_all(client, workdir, count)
    points = mount_points(pid)
    for _, staging in staged:
        assert str(staging) in points, f"{staging} is not mounted in the driver's namespace"

    # A raw block volume: NodePublish binds the loop device's node onto a file.
    vid, block_staging, target = h.block_in_use(client, workdir, "static-block", 16 * h.MiB)
    assert str(target) in mount_points(pid)
    device = Path(f"/proc/{pid}/root") / str(target).lstrip("/")
    assert device.is_block_device()

    h.release(client, vid, block_staging, target)
    for volume_id, staging in staged:
        h.unstage(client, volume_id, staging)
    assert not set(mount_points(pid)) & {str(s) for _, s in staged}
    # Every device this driver attached went with its unstage.
    left = [d for d in loops_backed_under(workdir) if not autoclear_pending(d)]
    assert not left, left
    assert "ERROR" not in handle.log(), handle.log()


def test_a_node_with_another_devices_numbers_is_refused(spawn: Any, workdir: Path) -> None:
    """Every /dev/loopN the attach could be handed carries another device's numbers (loop0's,
    and loop0's node loop1's): the driver must refuse it, loudly, and attach nothing; a
    configure through it reaches the other device."""
    loop0, loop1 = _sys_rdev(0), _sys_rdev(1)
    # The kernel hands out the lowest free number, at most one past those it has.
    nodes = dict.fromkeys(range(1, max(loop_indices()) + 8), loop0) | {0: loop1}
    _, client = spawn("drv", prefix=static_dev(loop_nodes=0, nodes=nodes))
    cap = h.mount_cap("ext4")
    vol = h.create(client, "wrong-node", cap, 16 * h.MiB)
    staging = workdir / "staging"
    staging.mkdir()
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    refused = grpc.StatusCode.FAILED_PRECONDITION
    err = h.expect_code(refused, h.stage, client, vol, staging, cap, ctx)
    assert "not the kernel's" in (err.details() or ""), err.details()
    assert loop_tag("node-a", vol.volume_id) not in _tags_of_devices_under(workdir)


def _sys_rdev(index: int) -> int:
    major, minor = Path(f"/sys/block/loop{index}/dev").read_text().strip().split(":")
    return os.makedev(int(major), int(minor))


def _tags_of_devices_under(workdir: Path) -> list[str]:
    held = (held_loop(d) for d in loops_backed_under(workdir))
    return [x.tag for x in held if x is not None]


def test_no_loop_control_is_an_error_that_says_what_to_do(spawn: Any, workdir: Path) -> None:
    _, client = spawn(
        "drv", prefix=static_dev(loop_control=False, kernel_without_loop_control=True)
    )
    cap = h.mount_cap("ext4")
    vol = h.create(client, "no-control", cap, 16 * h.MiB)
    staging = workdir / "staging"
    staging.mkdir()
    ctx = h.publish(client, vol.volume_id, "node-a", cap)
    err = h.expect_code(
        grpc.StatusCode.FAILED_PRECONDITION, h.stage, client, vol, staging, cap, ctx
    )
    assert "/dev/loop-control" in (err.details() or "")
    assert "modprobe loop" in (err.details() or ""), err.details()


def test_a_missing_loop_control_is_made_when_the_kernel_has_one(spawn: Any, workdir: Path) -> None:
    _, client = spawn("drv", prefix=static_dev(loop_control=False))
    cap = h.mount_cap("ext4")
    vol = h.create(client, "made-control", cap, 16 * h.MiB)
    staging = workdir / "staging"
    staging.mkdir()
    h.stage(client, vol, staging, cap, h.publish(client, vol.volume_id, "node-a", cap))
    h.unstage(client, vol.volume_id, staging)


def test_the_doctor_in_a_static_dev_makes_the_nodes_as_the_driver_does(workdir: Path) -> None:
    out = subprocess.run(
        [*static_dev(loop_nodes=0, loop_control=False), sys.executable, "-m", "csi_hostpath",
         "doctor", "--state-dir", str(workdir / "state"), "--pool-dir", str(workdir / "pool")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = {line.split()[1]: line for line in out.stdout.splitlines() if len(line.split()) > 1}
    for check in ("loop-control", "loop-devices"):
        assert lines[check].startswith("OK"), out.stdout
        assert "made here" in lines[check], out.stdout
