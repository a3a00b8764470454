"""Request builders and assertions shared by the gRPC-level tests."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.client.csi_requests import Mode, block_cap, mount_cap

MiB = 1 << 20
__all__ = ["Mode", "block_cap", "mount_cap"]


def create(
    client: Any, name: str, cap: pb.VolumeCapability, size: int = 64 * MiB, **kw: Any
) -> pb.Volume:
    request = rq.create_volume(name, cap, size)
    if kw:
        request.MergeFrom(pb.CreateVolumeRequest(**kw))
    response: pb.CreateVolumeResponse = client.controller.CreateVolume(request)
    return response.volume


def publish(
    client: Any, volume_id: str, node_id: str, cap: pb.VolumeCapability, readonly: bool = False
) -> dict[str, str]:
    response = client.controller.ControllerPublishVolume(
        rq.controller_publish(volume_id, node_id, cap, readonly)
    )
    return dict(response.publish_context)


def kubelet_makes(directory: Path) -> None:
    """The directory the kubelet makes before a node call (a staging path's or a target's
    parent); where a test put a file in its way, the driver's answer is what the test wants."""
    with contextlib.suppress(OSError):
        directory.mkdir(parents=True, exist_ok=True)


def stage(
    client: Any,
    volume: pb.Volume,
    staging: Path,
    cap: pb.VolumeCapability,
    publish_context: dict[str, str],
) -> None:
    # As the kubelet does: the staging path's parent is there before the call.
    kubelet_makes(staging.parent)
    client.node.NodeStageVolume(
        rq.node_stage(volume.volume_id, staging, cap, publish_context, volume.volume_context)
    )


def node_publish(
    client: Any,
    volume_id: str,
    staging: Path,
    target: Path,
    cap: pb.VolumeCapability,
    readonly: bool = False,
    publish_context: dict[str, str] | None = None,
    volume_context: dict[str, str] | None = None,
) -> None:
    # As the kubelet does: the target's parent is there before the call; the driver makes the
    # target itself.
    kubelet_makes(target.parent)
    client.node.NodePublishVolume(
        rq.node_publish(volume_id, staging, target, cap, readonly, publish_context, volume_context)
    )


def node_unpublish(client: Any, volume_id: str, target: Path) -> None:
    client.node.NodeUnpublishVolume(rq.node_unpublish(volume_id, target))


def unstage(client: Any, volume_id: str, staging: Path) -> None:
    client.node.NodeUnstageVolume(rq.node_unstage(volume_id, staging))


def unpublish(client: Any, volume_id: str, node_id: str) -> None:
    client.controller.ControllerUnpublishVolume(rq.controller_unpublish(volume_id, node_id))


def delete(client: Any, volume_id: str) -> None:
    client.controller.DeleteVolume(rq.delete_volume(volume_id))


def expect_code(
    code: grpc.StatusCode, call: Callable[..., Any], *args: Any, **kw: Any
) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kw)
    err = info.value
    assert err.code() == code, f"expected {code.name}, got {err.code().name}: {err.details()}"
    return err


def write_pattern(path: Path, size: int, seed: int = 7) -> bytes:
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    data = bytes((b + seed) % 256 for b in data[:4096]) + data[4096:]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return data


def mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def block_in_use(
    client: Any, workdir: Path, name: str, size: int, volume_context: dict[str, str] | None = None
) -> tuple[str, Path, Path]:
    """A block volume created, published to node-a, staged and published at a device target:
    (volume ID, staging path, target path). `release` undoes all of it."""
    cap = block_cap()
    vol = create(client, name, cap, size)
    ctx = publish(client, vol.volume_id, "node-a", cap)
    staging, target = workdir / f"{name}-staging", workdir / f"{name}-pod" / "dev"
    staging.mkdir()
    stage(client, vol, staging, cap, ctx)
    node_publish(
        client,
        vol.volume_id,
        staging,
        target,
        cap,
        publish_context=ctx,
        volume_context=volume_context,
    )
    return vol.volume_id, staging, target


def staged(
    client: Any, staging: Path, name: str, node_id: str = "node-a", size: int = 16 * MiB
) -> pb.Volume:
    """An ext4 volume created, published to node_id and staged at staging (made here)."""
    cap = mount_cap("ext4")
    vol = create(client, name, cap, size)
    staging.mkdir(parents=True)
    stage(client, vol, staging, cap, publish(client, vol.volume_id, node_id, cap))
    return vol


def staged_under(
    client: Any, workdir: Path, cap: pb.VolumeCapability, name: str
) -> tuple[str, Path, dict[str, str]]:
    """A volume of cap created, published to node-a and staged at workdir/kubelet/NAME/
    globalmount: (volume ID, staging path, publish context)."""
    vol = create(client, name, cap)
    ctx = publish(client, vol.volume_id, "node-a", cap)
    staging = workdir / "kubelet" / name / "globalmount"
    staging.mkdir(parents=True)
    stage(client, vol, staging, cap, ctx)
    return vol.volume_id, staging, ctx


def in_use(
    client: Any, workdir: Path, name: str, cap: pb.VolumeCapability, size: int = 32 << 20
) -> tuple[pb.Volume, Path, Path]:
    """A volume of cap created, published to node-a, staged and published at a target:
    (volume, staging path, target path). `release` undoes all of it."""
    vol = create(client, name, cap, size)
    ctx = publish(client, vol.volume_id, "node-a", cap)
    staging, target = workdir / f"{name}-staging", workdir / f"{name}-pod" / "target"
    staging.mkdir()
    stage(client, vol, staging, cap, ctx)
    node_publish(client, vol.volume_id, staging, target, cap, publish_context=ctx)
    return vol, staging, target


def release(client: Any, volume_id: str, staging: Path, target: Path) -> None:
    node_unpublish(client, volume_id, target)
    unstage(client, volume_id, staging)
    unpublish(client, volume_id, "node-a")
    delete(client, volume_id)


class Mounted:
    """A volume taken through ControllerPublish, NodeStage and NodePublish, and back."""

    def __init__(
        self, client: Any, workdir: Path, vol: pb.Volume, cap: pb.VolumeCapability, tag: str
    ) -> None:
        self.client, self.vol, self.cap = client, vol, cap
        self.staging = workdir / tag / "globalmount"
        self.target = workdir / tag / "mount"
        self.staging.mkdir(parents=True)
        self.ctx = publish(client, vol.volume_id, "node-a", cap)
        stage(client, vol, self.staging, cap, self.ctx)
        node_publish(client, vol.volume_id, self.staging, self.target, cap)

    def close(self) -> None:
        node_unpublish(self.client, self.vol.volume_id, self.target)
        unstage(self.client, self.vol.volume_id, self.staging)
        unpublish(self.client, self.vol.volume_id, "node-a")
