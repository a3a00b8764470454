"""(e) A snapshot and clones of a 10 GiB ext4 volume with 100 MiB written into it.

The source stays staged and published (a CO snapshots live volumes). Each figure is the time of
the RPC (until ready_to_use) and the new disk the pool uses for it: the change in the sum of
st_blocks * 512 over every file in the pool. A restored copy is mounted and the written file's
SHA-256 compared, so a fast but wrong copy does not pass. An RPC the driver does not implement
yet (UNIMPLEMENTED) is reported as "n/a (unimplemented)" instead of failing the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.harness import GiB, MiB, Stubs
from bench.lifecycle import Volume, teardown
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.client.csi_requests import mount_cap

SOURCE_SIZE = 10 * GiB
WRITTEN = 100 * MiB
_CHUNK = 4 * MiB
_READY_TIMEOUT = 120.0
_FILE = "data.bin"


def pool_allocated(pool_dir: Path) -> int:
    total = 0
    for base, _dirs, names in os.walk(pool_dir):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
    return total


@dataclass
class Outcome:
    """One RPC's figure: seconds and new disk, or why there is none."""

    status: str = "not run"  # "ok", "n/a (unimplemented)", "error: ..."
    seconds: float | None = None
    new_disk_bytes: int | None = None
    verified: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "seconds": self.seconds,
            "new_disk_bytes": self.new_disk_bytes,
            "data_verified": self.verified,
            **self.detail,
        }


def _failed(exc: grpc.RpcError) -> str:
    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
        return "n/a (unimplemented)"
    return f"error: {exc.code().name}: {str(exc.details())[:300]}"


@contextlib.contextmanager
def _in_use(stubs: Stubs, work: Path, node_id: str, volume: pb.Volume, name: str) -> Iterator[Path]:
    """Publish, stage and mount volume; yield its target; undo all of it (but not delete)."""
    cap = mount_cap("ext4")
    staging = work / "staging" / name
    staging.mkdir(parents=True, exist_ok=True)
    target = work / "pods" / name / "mount"
    target.parent.mkdir(parents=True, exist_ok=True)  # as the kubelet does
    vol = Volume(volume_id=volume.volume_id, staging=staging, target=target)
    try:
        published = stubs.controller.ControllerPublishVolume(
            rq.controller_publish(volume.volume_id, node_id, cap)
        )
        vol.published = True
        context = dict(published.publish_context)
        vol.staged = True  # a failed stage is still undone by the teardown (idempotent)
        stubs.node.NodeStageVolume(
            rq.node_stage(volume.volume_id, staging, cap, context, volume.volume_context)
        )
        vol.node_published = True
        stubs.node.NodePublishVolume(
            rq.node_publish(volume.volume_id, staging, target, cap, publish_context=context)
        )
        yield target
    finally:
        teardown(stubs, vol, node_id, None, delete=False)
        with contextlib.suppress(OSError):
            staging.rmdir()


def _write(target: Path) -> str:
    digest = hashlib.sha256()
    chunk = os.urandom(_CHUNK)
    fd = os.open(target / _FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(WRITTEN // _CHUNK):
            os.write(fd, chunk)
            digest.update(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _create_snapshot(stubs: Stubs, volume_id: str, name: str) -> pb.Snapshot:
    request = rq.create_snapshot(name, volume_id)
    deadline = time.monotonic() + _READY_TIMEOUT
    while True:
        response: pb.CreateSnapshotResponse = stubs.controller.CreateSnapshot(request)
        snapshot = response.snapshot
        if snapshot.ready_to_use or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.01)  # CreateSnapshot is idempotent by name: ask again until it is ready


def _clone(
    stubs: Stubs,
    work: Path,
    node_id: str,
    pool_dir: Path,
    name: str,
    source: pb.VolumeContentSource,
    digest: str,
    created: list[str],
) -> Outcome:
    outcome = Outcome()
    before = pool_allocated(pool_dir)
    start = time.perf_counter()
    try:
        response = stubs.controller.CreateVolume(
            rq.create_volume(name, mount_cap("ext4"), SOURCE_SIZE, source)
        )
    except grpc.RpcError as exc:
        outcome.status = _failed(exc)
        return outcome
    outcome.seconds = time.perf_counter() - start
    outcome.new_disk_bytes = pool_allocated(pool_dir) - before
    outcome.status = "ok"
    created.append(response.volume.volume_id)
    try:
        with _in_use(stubs, work, node_id, response.volume, name) as target:
            outcome.verified = _digest(target / _FILE) == digest
    except (grpc.RpcError, OSError) as exc:
        outcome.verified = False
        outcome.detail["verify_error"] = str(exc)[:300]
    return outcome


def snapshot_and_clones(stubs: Stubs, work: Path, node_id: str, pool_dir: Path) -> dict[str, Any]:
    """CreateSnapshot, CreateVolume from it, and CreateVolume from the volume, measured."""
    snap, restore, clone = Outcome(), Outcome(), Outcome()
    created: list[str] = []
    snapshot_id = ""
    source = stubs.controller.CreateVolume(
        rq.create_volume("snap-source", mount_cap("ext4"), SOURCE_SIZE)
    ).volume
    created.append(source.volume_id)
    source_file = pool_dir / "volumes" / f"{source.volume_id}.img"
    try:
        with _in_use(stubs, work, node_id, source, "snap-source") as target:
            digest = _write(target)
            source_used = os.stat(source_file).st_blocks * 512
            before = pool_allocated(pool_dir)
            start = time.perf_counter()
            try:
                snapshot = _create_snapshot(stubs, source.volume_id, "bench-snapshot")
            except grpc.RpcError as exc:
                snap.status = _failed(exc)
            else:
                snap.seconds = time.perf_counter() - start
                snap.new_disk_bytes = pool_allocated(pool_dir) - before
                snapshot_id = snapshot.snapshot_id
                snap.status = "ok" if snapshot.ready_to_use else "error: never ready_to_use"
                snap.detail["size_bytes"] = snapshot.size_bytes
            snap.detail["source_disk_used_bytes"] = source_used
            if snapshot_id:
                restore = _clone(
                    stubs,
                    work,
                    node_id,
                    pool_dir,
                    "snap-restore",
                    pb.VolumeContentSource(
                        snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snapshot_id)
                    ),
                    digest,
                    created,
                )
            else:
                restore.status = (
                    snap.status if snap.status.startswith("n/a") else "n/a (no snapshot)"
                )
            clone = _clone(
                stubs,
                work,
                node_id,
                pool_dir,
                "snap-clone",
                pb.VolumeContentSource(
                    volume=pb.VolumeContentSource.VolumeSource(volume_id=source.volume_id)
                ),
                digest,
                created,
            )
    finally:
        # Copies first, then the snapshot, then the source: the order a CO cleans up in.
        for volume_id in reversed(created[1:]):
            with contextlib.suppress(grpc.RpcError):
                stubs.controller.DeleteVolume(rq.delete_volume(volume_id))
        if snapshot_id:
            with contextlib.suppress(grpc.RpcError):
                stubs.controller.DeleteSnapshot(rq.delete_snapshot(snapshot_id))
        stubs.controller.DeleteVolume(rq.delete_volume(source.volume_id))
    return {
        "source_size_bytes": SOURCE_SIZE,
        "written_bytes": WRITTEN,
        "snapshot": snap.as_dict(),
        "restore_from_snapshot": restore.as_dict(),
        "clone_from_volume": clone.as_dict(),
    }
