"""Path guards on real loop devices and mounts: a CO's path is judged by what it resolves to.

The guards used to compare strings: a symlink to the driver's own directories passed as a staging
path, a dangling symlink at a block target made the file it points to, and NodeUnpublish took any
mount whose root was named `/loopN` for the volume's device node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import grpc

from tests.conftest import Client
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def test_driver_dirs_their_ancestors_and_symlinks_to_them_are_refused(
    driver: Client, workdir: Path
) -> None:
    """Failed on the old code: a symlink to the state directory was staged (an ext4 mounted over
    the driver's own state), as was a symlink to the pool and the work directory itself."""
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "guarded", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    state = workdir / "drv-state"
    links = workdir / "kubelet" / "links"
    links.mkdir(parents=True)
    via_parent = workdir / "kubelet" / "parent-link"
    via_parent.symlink_to(state)
    candidates = [
        state,
        state / "pool",
        state / "pool" / "volumes",
        workdir,  # an ancestor of both
        via_parent / "globalmount",  # inside the state directory, through a symlinked parent
    ]
    for i, real in enumerate([state, state / "pool", workdir]):
        link = links / f"link{i}"
        link.symlink_to(real)
        candidates.append(link)
    before = {str(p) for p in [state, state / "pool", workdir] if h.mounted(p)}
    for staging in candidates:
        err = h.expect_code(INVALID, h.stage, driver, vol, staging, cap, ctx)
        assert "staging_target_path" in (err.details() or ""), err.details()
        target = links / "target-link"
        target.unlink(missing_ok=True)
        target.symlink_to(staging)
        h.expect_code(
            INVALID, h.node_publish, driver, vol.volume_id, workdir / "st", target, cap, False, ctx
        )
    assert {str(p) for p in [state, state / "pool", workdir] if h.mounted(p)} == before
    assert not (state / "globalmount").exists()


def test_dangling_symlink_as_block_target_creates_nothing(driver: Client, workdir: Path) -> None:
    """Failed on the old code: NodePublish followed the link, created the file it names, bound
    the device there and answered OK."""
    cap = h.block_cap()
    volume_id, staging, ctx = h.staged_under(driver, workdir, cap, "dangling")
    victim = workdir / "elsewhere" / "victim"
    victim.parent.mkdir()
    target = workdir / "pods" / "uid1" / "volumeDevices" / "dev"
    target.parent.mkdir(parents=True)
    target.symlink_to(victim)
    err = h.expect_code(
        INVALID, h.node_publish, driver, volume_id, staging, target, cap, False, ctx
    )
    assert "symbolic link" in (err.details() or "")
    assert not victim.exists() and not h.mounted(victim)
    assert target.is_symlink(), "the CO's link is left as it was"
    # A directory target that is a symlink to a real directory is refused the same way.
    mount_link = workdir / "pods" / "uid1" / "mount"
    mount_link.symlink_to(victim.parent)
    h.expect_code(INVALID, h.node_publish, driver, volume_id, staging, mount_link, cap, False, ctx)
    assert not h.mounted(victim.parent)
    h.unstage(driver, volume_id, staging)


def test_unpublish_leaves_a_foreign_mount_whose_root_is_named_like_the_device(
    driver: Client, workdir: Path
) -> None:
    """A tmpfs directory named `loopN` (N the volume's own device) bound at a target: its
    mountinfo root is `/loopN`, as a bind of the device node's is. Failed on the old code:
    NodeUnpublish took it for the volume's device node and unmounted it. Now only a mount that
    is the block device node itself (same device number) counts as the volume's."""
    cap = h.block_cap()
    volume_id, staging, ctx = h.staged_under(driver, workdir, cap, "lookalike")
    backing = str(workdir / "drv-state" / "pool" / "volumes" / f"{volume_id}.img")
    (device,) = [
        d for d in loops_backed_under(workdir)
        if Path(f"/sys/block/{d[5:]}/loop/backing_file").read_text().strip() == backing
    ]  # fmt: skip
    other = workdir / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "csihp-other", str(other)], check=True)
    (other / os.path.basename(device)).mkdir()
    (other / os.path.basename(device) / "theirs").write_text("not the volume")
    foreign = workdir / "pods" / "uid2" / "dev"
    foreign.mkdir(parents=True)
    subprocess.run(
        ["mount", "--bind", str(other / os.path.basename(device)), str(foreign)], check=True
    )
    h.node_unpublish(driver, volume_id, foreign)  # OK: nothing of the volume's is there
    assert h.mounted(foreign), "the foreign mount was unmounted"
    assert (foreign / "theirs").read_text() == "not the volume"
    subprocess.run(["umount", str(foreign)], check=True)

    # The volume's own device node at a target is still recognised and taken down.
    target = workdir / "pods" / "uid3" / "dev"
    h.node_publish(driver, volume_id, staging, target, cap, publish_context=ctx)
    assert h.mounted(target)
    h.node_unpublish(driver, volume_id, target)
    assert not h.mounted(target) and not target.exists()
    h.unstage(driver, volume_id, staging)


def test_teardown_never_follows_a_symlink_to_another_target(driver: Client, workdir: Path) -> None:
    """A symlink to the volume's real target, handed to NodeUnpublish, and one to its real
    staging path, handed to NodeUnstage: nothing of the volume's is mounted *at* either link, so
    both answer OK and touch nothing. Failed on the old code: NodeUnpublish resolved the link and
    unmounted the other pod's target."""
    cap = h.mount_cap("ext4")
    volume_id, staging, ctx = h.staged_under(driver, workdir, cap, "follow")
    target = workdir / "pods" / "uid1" / "mount"
    h.node_publish(driver, volume_id, staging, target, cap, publish_context=ctx)
    (target / "data").write_text("pod one")
    links = workdir / "pods" / "uid2"
    links.mkdir(parents=True)
    (links / "mount").symlink_to(target)
    h.node_unpublish(driver, volume_id, links / "mount")
    assert h.mounted(target) and (target / "data").read_text() == "pod one"
    assert (links / "mount").is_symlink(), "the link is not the driver's to remove"
    h.node_unpublish(driver, volume_id, target)
    (links / "globalmount").symlink_to(staging)
    h.unstage(driver, volume_id, links / "globalmount")  # staged elsewhere: OK, nothing touched
    assert h.mounted(staging)
    h.unstage(driver, volume_id, staging)
    assert not h.mounted(staging)
