"""Request builders and assertions shared by the gRPC-level tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb

MiB = 1 << 20
Mode = pb.VolumeCapability.AccessMode


def mount_cap(
    fs_type: str = "", mode: int = Mode.SINGLE_NODE_WRITER, flags: tuple[str, ...] = ()
) -> pb.VolumeCapability:
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(fs_type=fs_type, mount_flags=list(flags)),
        access_mode=Mode(mode=mode),
    )


def block_cap(mode: int = Mode.SINGLE_NODE_WRITER) -> pb.VolumeCapability:
    return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(), access_mode=Mode(mode=mode))


def create(
    client: Any, name: str, cap: pb.VolumeCapability, size: int = 64 * MiB, **kw: Any
) -> pb.Volume:
    response = client.controller.CreateVolume(
        pb.CreateVolumeRequest(
            name=name,
            volume_capabilities=[cap],
            capacity_range=pb.CapacityRange(required_bytes=size),
            **kw,
        )
    )
    return response.volume


def publish(
    client: Any, volume_id: str, node_id: str, cap: pb.VolumeCapability, readonly: bool = False
) -> dict[str, str]:
    response = client.controller.ControllerPublishVolume(
        pb.ControllerPublishVolumeRequest(
            volume_id=volume_id, node_id=node_id, volume_capability=cap, readonly=readonly
        )
    )
    return dict(response.publish_context)


def stage(
    client: Any,
    volume: pb.Volume,
    staging: Path,
    cap: pb.VolumeCapability,
    publish_context: dict[str, str],
) -> None:
    client.node.NodeStageVolume(
        pb.NodeStageVolumeRequest(
            volume_id=volume.volume_id,
            staging_target_path=str(staging),
            volume_capability=cap,
            publish_context=publish_context,
            volume_context=dict(volume.volume_context),
        )
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
    client.node.NodePublishVolume(
        pb.NodePublishVolumeRequest(
            volume_id=volume_id,
            staging_target_path=str(staging),
            target_path=str(target),
            volume_capability=cap,
            readonly=readonly,
            publish_context=publish_context or {},
            volume_context=volume_context or {},
        )
    )


def node_unpublish(client: Any, volume_id: str, target: Path) -> None:
    client.node.NodeUnpublishVolume(
        pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=str(target))
    )


def unstage(client: Any, volume_id: str, staging: Path) -> None:
    client.node.NodeUnstageVolume(
        pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=str(staging))
    )


def unpublish(client: Any, volume_id: str, node_id: str) -> None:
    client.controller.ControllerUnpublishVolume(
        pb.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id)
    )


def delete(client: Any, volume_id: str) -> None:
    client.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=volume_id))


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
