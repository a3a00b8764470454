"""Inline ephemeral volumes on real loop devices: opt-in, capped, and kept in the pool.

Inline ephemeral volumes on real loop devices: opt-in, capped by --max-inline-size, and kept
in the pool, never beside state.db.

Any pod author can ask for an inline volume. Before this, each one was a file in the state
directory, with its size judged against the pool's filesystem: one pod could fill the filesystem
that holds state.db, after which no teardown could commit."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, in_process
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under, released_after_teardown

MiB = h.MiB
EPHEMERAL = "csi.storage.k8s.io/ephemeral"
# The driver names an inline volume by node ID and kubelet's name, and tags its loop device so:
# a name of this run's own keeps other runs on this kernel (same node ID) from sharing it.
NAME = f"csi-{uuid.uuid4().hex}"


def inline_request(target: Path, size: str = "", name: str = NAME) -> object:
    context = {EPHEMERAL: "true", "csi.storage.k8s.io/pod.name": "p1"}
    if size:
        context["size"] = size
    h.kubelet_makes(target.parent)
    return pb.NodePublishVolumeRequest(
        volume_id=name,
        target_path=str(target),
        volume_capability=h.mount_cap("ext4"),
        volume_context=context,
    )


def tmpfs(path: Path, size: str) -> Path:
    path.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "csihp-inl", str(path)], check=True
    )
    return path


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def backing_files(workdir: Path) -> list[str]:
    return [Path(f"/sys/block/{d[5:]}/loop/backing_file").read_text().strip()
            for d in loops_backed_under(workdir)]  # fmt: skip


def test_inline_volumes_are_refused_unless_allowed(driver: Client, workdir: Path) -> None:
    """Off by default. Failed on the old code: the volume was created and mounted."""
    target = workdir / "pods" / "p1" / "inline"
    err = h.expect_code(
        grpc.StatusCode.INVALID_ARGUMENT, driver.node.NodePublishVolume, inline_request(target)
    )
    assert "--allow-inline-volumes" in (err.details() or "")
    assert not target.exists() and not released_after_teardown(workdir)


def test_inline_volume_past_the_cap_is_out_of_range(workdir: Path) -> None:
    """Failed on the old code: it had no --max-inline-size (the driver would not even start)."""
    flags = ("--allow-inline-volumes", "--max-inline-size", "64Mi")
    with in_process(workdir, "drv", *flags) as client:
        target = workdir / "pods" / "p1" / "inline"
        err = h.expect_code(
            grpc.StatusCode.OUT_OF_RANGE,
            client.node.NodePublishVolume,
            inline_request(target, "65Mi"),
        )
        assert "--max-inline-size" in (err.details() or "")
        assert not target.exists() and not released_after_teardown(workdir)
        # No size asked: the default, cut to the cap.
        client.node.NodePublishVolume(inline_request(target))
        stats = client.node.NodeGetVolumeStats(
            pb.NodeGetVolumeStatsRequest(volume_id=NAME, volume_path=str(target))
        )
        assert 40 * MiB < stats.usage[0].total <= 64 * MiB
        h.node_unpublish(client, NAME, target)
        assert not released_after_teardown(workdir)


def test_inline_volume_never_fills_the_state_filesystem(workdir: Path) -> None:
    """The state directory on a 16 MiB tmpfs, the pool on a 128 MiB one. A 48 MiB inline volume
    fits the pool, so it is accepted, and a pod writes 32 MiB into it. Failed on the old code:
    the file lay in STATE/ephemeral, so the pod's writes filled the state filesystem (the loop
    device's backing file was under the state directory, and its writes failed)."""
    state = tmpfs(workdir / "statefs", "16m")
    pool = tmpfs(workdir / "poolfs", "128m")
    flags = ("--state-dir", str(state), "--pool-dir", str(pool), "--allow-inline-volumes")
    with in_process(workdir, "drv", *flags) as client:
        state_free = free(state)
        target = workdir / "pods" / "p1" / "inline"
        client.node.NodePublishVolume(inline_request(target, "48Mi"))
        backing = backing_files(workdir)
        assert len(backing) == 1 and backing[0].startswith(f"{pool}/"), backing
        with open(target / "data", "wb") as f:
            f.write(os.urandom(32 * MiB))
            f.flush()
            os.fsync(f.fileno())
        assert free(state) >= state_free - MiB, "the pod's writes went to the state filesystem"
        h.node_unpublish(client, NAME, target)
        assert not target.exists() and not released_after_teardown(workdir)
        assert not list(pool.rglob("*.img")), "the inline volume's file is removed"


def test_inline_size_is_judged_on_the_filesystem_that_holds_it(workdir: Path) -> None:
    """The pool on a 32 MiB tmpfs, the state on the large /tmp: a 48 MiB inline volume can't fit
    where its file goes, so it is RESOURCE_EXHAUSTED and nothing is left behind."""
    pool = tmpfs(workdir / "poolfs", "32m")
    flags = ("--pool-dir", str(pool), "--allow-inline-volumes")
    with in_process(workdir, "drv", *flags) as client:
        target = workdir / "pods" / "p1" / "inline"
        h.expect_code(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            client.node.NodePublishVolume,
            inline_request(target, "48Mi"),
        )
        assert not released_after_teardown(workdir)
        assert not list(pool.rglob("*.img"))


def test_inline_volumes_count_in_the_pools_promises(workdir: Path) -> None:
    """An inline volume is a thin file in the pool like any other: GetCapacity stops promising
    what it may still grow into. Failed before this: GetCapacity went on promising the 48 MiB
    the inline volume could still write (only the controller's own volumes counted)."""
    pool = tmpfs(workdir / "poolfs", "128m")
    flags = ("--pool-dir", str(pool), "--allow-inline-volumes")
    with in_process(workdir, "drv", *flags) as client:

        def capacity() -> int:
            return int(client.controller.GetCapacity(pb.GetCapacityRequest()).available_capacity)

        before = capacity()
        target = workdir / "pods" / "p1" / "inline"
        client.node.NodePublishVolume(inline_request(target, "48Mi"))
        assert capacity() <= before - 40 * MiB, (before, capacity())
        h.node_unpublish(client, NAME, target)
        assert capacity() >= before - MiB
