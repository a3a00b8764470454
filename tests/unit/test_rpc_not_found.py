"""An unknown volume, node or volume path is NOT_FOUND over gRPC, on both system layers.

Each names the rule of CSI v1.12.0 spec.md it checks (the Errors tables of these RPCs); each runs
on the fake layer (make unit) and the real one (root)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.support import helpers as h
from tests.unit.rpc_rule_cases import CAP, UNKNOWN_VOLUME, stub_method

C = grpc.StatusCode

# ---- "Volume does not exist → NOT_FOUND" (spec.md Errors tables of these RPCs) ----
NOT_FOUND: list[tuple[str, str, Callable[[Path], Any]]] = [
    (
        "ControllerPublishVolume: Volume does not exist",
        "controller.ControllerPublishVolume",
        lambda d: pb.ControllerPublishVolumeRequest(
            volume_id=UNKNOWN_VOLUME, node_id="node-a", volume_capability=CAP
        ),
    ),
    (
        "ValidateVolumeCapabilities: Volume does not exist",
        "controller.ValidateVolumeCapabilities",
        lambda d: pb.ValidateVolumeCapabilitiesRequest(
            volume_id=UNKNOWN_VOLUME, volume_capabilities=[CAP]
        ),
    ),
    (
        "NodeStageVolume: Volume does not exist",
        "node.NodeStageVolume",
        lambda d: pb.NodeStageVolumeRequest(
            volume_id=UNKNOWN_VOLUME, staging_target_path=str(d / "s"), volume_capability=CAP
        ),
    ),
    (
        "NodePublishVolume: Volume does not exist",
        "node.NodePublishVolume",
        lambda d: pb.NodePublishVolumeRequest(
            volume_id=UNKNOWN_VOLUME,
            staging_target_path=str(d / "s"),
            target_path=str(d / "t"),
            volume_capability=CAP,
        ),
    ),
    (
        "NodeGetVolumeStats: Volume does not exist",
        "node.NodeGetVolumeStats",
        lambda d: pb.NodeGetVolumeStatsRequest(volume_id=UNKNOWN_VOLUME, volume_path=str(d)),
    ),
    (
        "ControllerPublishVolume: an ID this driver never issued is NOT_FOUND, never a path",
        "controller.ControllerPublishVolume",
        lambda d: pb.ControllerPublishVolumeRequest(
            volume_id="../../etc/passwd", node_id="node-a", volume_capability=CAP
        ),
    ),
]


@pytest.mark.parametrize(("rule", "method", "build"), NOT_FOUND, ids=[m[0] for m in NOT_FOUND])
def test_unknown_volume_is_not_found(
    layered_driver: Client, workdir: Path, rule: str, method: str, build: Callable[[Path], Any]
) -> None:
    h.expect_code(C.NOT_FOUND, stub_method(layered_driver, method), build(workdir))


def test_publish_to_unknown_node_is_not_found(layered_driver: Client) -> None:
    """ControllerPublishVolume: 'Node does not exist' → NOT_FOUND."""
    vol = h.create(layered_driver, "n", CAP, 32 * h.MiB)
    err = h.expect_code(C.NOT_FOUND, h.publish, layered_driver, vol.volume_id, "node-zz", CAP)
    assert "node-zz" in (err.details() or "")


def test_stats_on_unpublished_path_is_not_found(layered_driver: Client, workdir: Path) -> None:
    """NodeGetVolumeStats: 'Volume does not exist' at volume_path → NOT_FOUND."""
    vol = h.create(layered_driver, "stats", CAP, 32 * h.MiB)
    h.expect_code(
        C.NOT_FOUND,
        layered_driver.node.NodeGetVolumeStats,
        pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=str(workdir)),
    )
