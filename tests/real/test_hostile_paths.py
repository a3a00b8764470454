"""Paths that can't be right, on real loop devices and mounts.

A parent swapped for a link after the publish, a target at or inside the staging path,
directories and files that hold data, a parent that the CO did not make. Each failed on the old
code (71b7c67): the unpublish unmounted the other tmpfs and removed its directory; the
overlapping targets answered OK (one made a directory inside the user's filesystem, and its
unpublish took the staging mount down); the non-empty directory and file were mounted over; the
missing parent was made with `mkdir -p`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import grpc

from csi_hostpath.client import csi_requests as rq
from tests.conftest import Client
from tests.support import helpers as h

INVALID = grpc.StatusCode.INVALID_ARGUMENT
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


def _mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def test_unpublish_through_a_swapped_parent_unmounts_nothing_of_anyone_else(
    driver: Client, workdir: Path
) -> None:
    cap = h.mount_cap("ext4")
    volume_id, staging, ctx = h.staged_under(driver, workdir, cap, "swapped")
    parent = workdir / "pods" / "uid1" / "p"
    target = parent / "t"
    h.node_publish(driver, volume_id, staging, target, cap, publish_context=ctx)
    (target / "mine").write_text("the volume's")
    other = workdir / "other"
    (other / "t").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "csihp-other", str(other / "t")],
                   check=True)  # fmt: skip
    try:
        (other / "t" / "theirs").write_text("someone else's")
        moved = parent.with_name("p-real")
        parent.rename(moved)
        parent.symlink_to(other)
        err = h.expect_code(PRECONDITION, h.node_unpublish, driver, volume_id, target)
        assert "symbolic link" in (err.details() or ""), err.details()
        assert str(moved / "t") in (err.details() or ""), "the answer says where the mount is"
        assert _mounted(other / "t") and (other / "t" / "theirs").read_text() == "someone else's"
        assert _mounted(moved / "t") and (moved / "t" / "mine").read_text() == "the volume's"
        # Put back as the CO made it, the same call takes the volume's own mount down.
        parent.unlink()
        moved.rename(parent)
        h.node_unpublish(driver, volume_id, target)
        assert not target.exists() and _mounted(other / "t")
    finally:
        subprocess.run(["umount", str(other / "t")], check=False)
    h.unstage(driver, volume_id, staging)


def test_targets_at_inside_or_above_the_staging_path_are_refused(
    driver: Client, workdir: Path
) -> None:
    cap = h.mount_cap("ext4")
    volume_id, staging, ctx = h.staged_under(driver, workdir, cap, "overlap")
    for target in (staging, staging / "inside", staging.parent):
        err = h.expect_code(
            INVALID, h.node_publish, driver, volume_id, staging, target, cap, False, ctx
        )
        assert "staging_target_path" in (err.details() or ""), err.details()
    assert sorted(p.name for p in staging.iterdir()) == ["lost+found"], "made nothing inside"
    # A target reached by another name of a directory inside the volume's filesystem.
    (staging / "dir").mkdir()
    alias = workdir / "alias"
    alias.mkdir()
    subprocess.run(["mount", "--bind", str(staging / "dir"), str(alias)], check=True)
    try:
        err = h.expect_code(
            INVALID, h.node_publish, driver, volume_id, staging, alias / "t", cap, False, ctx
        )
        assert "own filesystem" in (err.details() or ""), err.details()
        assert not (staging / "dir" / "t").exists(), "made a directory inside the volume"
    finally:
        subprocess.run(["umount", str(alias)], check=True)
        (staging / "dir").rmdir()
    assert _mounted(staging)
    h.unstage(driver, volume_id, staging)


def test_directories_and_files_that_hold_data_are_not_mounted_over(
    driver: Client, workdir: Path
) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "full", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging = workdir / "kubelet" / "full" / "globalmount"
    staging.mkdir(parents=True)
    (staging / "keep").write_text("here before")
    err = h.expect_code(INVALID, h.stage, driver, vol, staging, cap, ctx)
    assert "not empty" in (err.details() or "") and "keep" in (err.details() or "")
    assert not _mounted(staging) and (staging / "keep").read_text() == "here before"
    (staging / "keep").unlink()
    h.stage(driver, vol, staging, cap, ctx)
    h.stage(driver, vol, staging, cap, ctx)  # the repeat: the mount there is the volume's
    target = workdir / "pods" / "uid2" / "mount"
    target.mkdir(parents=True)
    (target / "keep").write_text("here before")
    err = h.expect_code(
        INVALID, h.node_publish, driver, vol.volume_id, staging, target, cap, False, ctx
    )
    assert not _mounted(target) and (target / "keep").read_text() == "here before"
    h.unstage(driver, vol.volume_id, staging)

    block = h.block_cap()
    bvol = h.create(driver, "full-block", block)
    bctx = h.publish(driver, bvol.volume_id, "node-a", block)
    bstaging = workdir / "kubelet" / "full-block" / "staging"
    bstaging.mkdir(parents=True)
    h.stage(driver, bvol, bstaging, block, bctx)
    device_target = workdir / "pods" / "uid3" / "dev"
    device_target.parent.mkdir(parents=True)
    device_target.write_text("a file's bytes")
    err = h.expect_code(
        INVALID, h.node_publish, driver, bvol.volume_id, bstaging, device_target, block, False,
        bctx,
    )  # fmt: skip
    assert "holds" in (err.details() or ""), err.details()
    assert device_target.read_text() == "a file's bytes"
    h.unstage(driver, bvol.volume_id, bstaging)


def test_a_parent_the_co_did_not_make_is_refused(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "orphan", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging = workdir / "nowhere" / "deep" / "globalmount"
    err = h.expect_code(
        INVALID,
        driver.node.NodeStageVolume,
        rq.node_stage(vol.volume_id, staging, cap, ctx, vol.volume_context),
    )
    assert "parent directory" in (err.details() or ""), err.details()
    assert not (workdir / "nowhere").exists(), "the driver made the CO's directories"
    staging = workdir / "kubelet" / "orphan" / "globalmount"
    staging.mkdir(parents=True)
    h.stage(driver, vol, staging, cap, ctx)
    target = workdir / "pods" / "missing" / "mount"
    err = h.expect_code(
        INVALID,
        driver.node.NodePublishVolume,
        rq.node_publish(vol.volume_id, staging, target, cap, False, ctx),
    )
    assert not (workdir / "pods").exists()
    assert os.path.ismount(staging)
    h.unstage(driver, vol.volume_id, staging)
