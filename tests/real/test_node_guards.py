"""Node guards on real loop devices: mount flags, foreign mounts, repeats, the lease.

Node guards on real loop devices: mount flags that change the mount source, foreign mounts at
the staging path, a repeated NodeStage that asks for something else, the lease and the grant's
access type. CO paths that are symlinks or name the driver's own directories:
tests/real/test_path_guards.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.support import helpers as h
from tests.support.needs import needs_fs

MiB = h.MiB


def _paths(workdir: Path) -> tuple[Path, Path]:
    staging = workdir / "kubelet" / "globalmount"
    staging.mkdir(parents=True)
    target = workdir / "pods" / "uid1" / "mount"
    target.parent.mkdir(parents=True)
    return staging, target


def _backing(workdir: Path, volume_id: str) -> Path:
    return workdir / "drv-state" / "pool" / "volumes" / f"{volume_id}.img"


# ----- options that change the mount source; foreign mounts at the staging path -----


def test_loop_flag_is_refused_at_stage(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "loopflag", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, _ = _paths(workdir)
    for flags in (("loop",), ("ro,loop",), ("offset=4096",), ("sizelimit=1048576",)):
        err = h.expect_code(
            grpc.StatusCode.INVALID_ARGUMENT,
            h.stage,
            driver,
            vol,
            staging,
            h.mount_cap("ext4", flags=flags),
            ctx,
        )
        assert "mount source" in (err.details() or "")
        assert not h.mounted(staging)


def test_source_flags_are_refused_at_publish(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "bindflag", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, target = _paths(workdir)
    h.stage(driver, vol, staging, cap, ctx)
    err = h.expect_code(
        grpc.StatusCode.INVALID_ARGUMENT,
        h.node_publish,
        driver,
        vol.volume_id,
        staging,
        target,
        h.mount_cap("ext4", flags=("x-mount.mkdir", "encryption=aes")),
    )
    assert "mount source" in (err.details() or "")
    assert not h.mounted(target)


def test_unstage_refuses_while_a_foreign_mount_sits_on_staging(
    driver: Client, workdir: Path
) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "foreign", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, _ = _paths(workdir)
    h.stage(driver, vol, staging, cap, ctx)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "other", str(staging)], check=True)
    err = h.expect_code(
        grpc.StatusCode.FAILED_PRECONDITION, h.unstage, driver, vol.volume_id, staging
    )
    assert "umount" in (err.details() or "")
    assert h.mounted(staging)
    # The CO stops at the failed unstage, and DeleteVolume still refuses: the file stays.
    h.expect_code(grpc.StatusCode.FAILED_PRECONDITION, h.delete, driver, vol.volume_id)
    assert _backing(workdir, vol.volume_id).exists()
    subprocess.run(["umount", str(staging)], check=True)
    h.unstage(driver, vol.volume_id, staging)
    assert not h.mounted(staging)


# ----- a repeated NodeStage that asks for something else is ALREADY_EXISTS -----


def test_restage_with_other_flags_or_fs_is_already_exists(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "restage", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, _ = _paths(workdir)
    h.stage(driver, vol, staging, h.mount_cap("ext4", flags=("nodev",)), ctx)
    h.stage(driver, vol, staging, h.mount_cap("ext4", flags=("nodev",)), ctx)  # same: OK
    for other in (h.mount_cap("ext4", flags=("noexec",)), h.mount_cap("ext4"), h.mount_cap("xfs")):
        h.expect_code(grpc.StatusCode.ALREADY_EXISTS, h.stage, driver, vol, staging, other, ctx)
    h.unstage(driver, vol.volume_id, staging)


# ----- the lease at NodePublish, the grant's access type at NodeStage -----


def test_publish_after_revocation_is_refused(driver: Client, workdir: Path) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "revoked", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, target = _paths(workdir)
    h.stage(driver, vol, staging, cap, ctx)
    h.unpublish(driver, vol.volume_id, "node-a")  # the ledger revokes the node's grant
    h.expect_code(
        grpc.StatusCode.FAILED_PRECONDITION,
        h.node_publish,
        driver,
        vol.volume_id,
        staging,
        target,
        cap,
        publish_context=ctx,
    )
    assert not h.mounted(target)
    h.unstage(driver, vol.volume_id, staging)


def test_block_grant_staged_as_filesystem_is_refused(driver: Client, workdir: Path) -> None:
    vol = h.create(driver, "blockgrant", h.block_cap())
    ctx = h.publish(driver, vol.volume_id, "node-a", h.block_cap())
    backing = _backing(workdir, vol.volume_id)
    data = h.write_pattern(backing, 4 * MiB)  # what a pod wrote through the block device
    os.truncate(backing, vol.capacity_bytes)
    staging, _ = _paths(workdir)
    h.expect_code(
        grpc.StatusCode.FAILED_PRECONDITION, h.stage, driver, vol, staging, h.mount_cap(), ctx
    )
    assert not h.mounted(staging)
    with open(backing, "rb") as f:
        assert f.read(len(data)) == data, "the block data must not be formatted away"


@needs_fs("xfs")
def test_clones_and_restores_keep_the_source_kind(driver: Client, workdir: Path) -> None:
    from csi_hostpath._pb import csi_pb2 as pb

    block = h.create(driver, "src-block", h.block_cap())
    xfs = h.create(driver, "src-xfs", h.mount_cap("xfs"), size=320 * MiB)
    snap = driver.controller.CreateSnapshot(
        pb.CreateSnapshotRequest(source_volume_id=xfs.volume_id, name="snap-xfs")
    ).snapshot

    def from_volume(volume_id: str) -> pb.VolumeContentSource:
        return pb.VolumeContentSource(
            volume=pb.VolumeContentSource.VolumeSource(volume_id=volume_id)
        )

    cases = [
        ("block-as-fs", h.mount_cap("ext4"), from_volume(block.volume_id)),
        ("fs-as-block", h.block_cap(), from_volume(xfs.volume_id)),
        (
            "xfs-snap-as-ext4",
            h.mount_cap("ext4"),
            pb.VolumeContentSource(
                snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snap.snapshot_id)
            ),
        ),
    ]
    for name, cap, source in cases:
        h.expect_code(
            grpc.StatusCode.INVALID_ARGUMENT,
            h.create,
            driver,
            name,
            cap,
            320 * MiB,
            volume_content_source=source,
        )
    restored = h.create(
        driver,
        "xfs-snap-as-xfs",
        h.mount_cap("xfs"),
        320 * MiB,
        volume_content_source=cases[2][2],
    )
    assert restored.volume_id


def _namespace_copy_of_mounts() -> subprocess.Popen[bytes]:
    """A process in a mount namespace of its own, made now: it holds a copy of every mount."""
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "600"])
    mine = os.stat("/proc/self/ns/mnt").st_ino
    for _ in range(500):
        try:
            if os.stat(f"/proc/{holder.pid}/ns/mnt").st_ino != mine:
                return holder
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    holder.kill()
    raise AssertionError("unshare made no mount namespace")


def test_a_restage_that_must_grow_while_another_namespace_holds_the_mount_is_unavailable(
    driver: Client, workdir: Path
) -> None:
    """Expanded while unstaged, an ext4 grows before it is mounted (e2fsck, resize2fs), which
    can't be done while a copy of its old mount lives in another mount namespace: a retriable
    UNAVAILABLE that names the process, never INTERNAL; the retry works once it is gone."""
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "held", cap, 64 * MiB)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    staging, _ = _paths(workdir)
    h.stage(driver, vol, staging, cap, ctx)
    holder = _namespace_copy_of_mounts()
    try:
        h.unstage(driver, vol.volume_id, staging)
        driver.controller.ControllerExpandVolume(
            pb.ControllerExpandVolumeRequest(
                volume_id=vol.volume_id, capacity_range=pb.CapacityRange(required_bytes=128 * MiB)
            )
        )
        err = h.expect_code(grpc.StatusCode.UNAVAILABLE, h.stage, driver, vol, staging, cap, ctx)
        assert f"pid {holder.pid} (sleep" in (err.details() or ""), err.details()
        assert "another mount namespace" in (err.details() or "")
        assert not h.mounted(staging)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    h.stage(driver, vol, staging, cap, ctx)
    assert os.statvfs(staging).f_blocks * os.statvfs(staging).f_frsize > 100 * MiB
    h.unstage(driver, vol.volume_id, staging)
