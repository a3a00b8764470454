"""Every REQUIRED field of every RPC, left out, is INVALID_ARGUMENT naming it, on both layers.

Each row names the rule of CSI v1.12.0 spec.md it checks (each RPC's Errors table and the REQUIRED
marks on its request fields); each runs on the fake layer (make unit) and the real one (root)."""

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

# ---- "Missing required fields → INVALID_ARGUMENT" (spec.md, each RPC's Errors table and the
# "REQUIRED" marks on its request fields) ----
MISSING: list[tuple[str, str, Callable[[Path], Any]]] = [
    (
        "CreateVolume: name is REQUIRED",
        "controller.CreateVolume",
        lambda d: pb.CreateVolumeRequest(volume_capabilities=[CAP]),
    ),
    (
        "CreateVolume: volume_capabilities is REQUIRED",
        "controller.CreateVolume",
        lambda d: pb.CreateVolumeRequest(name="x"),
    ),
    (
        "CreateVolume: access_type is REQUIRED in a VolumeCapability",
        "controller.CreateVolume",
        lambda d: pb.CreateVolumeRequest(
            name="x",
            volume_capabilities=[
                pb.VolumeCapability(access_mode=h.Mode(mode=h.Mode.SINGLE_NODE_WRITER))
            ],
        ),
    ),
    (
        "CreateVolume: access_mode is REQUIRED in a VolumeCapability",
        "controller.CreateVolume",
        lambda d: pb.CreateVolumeRequest(
            name="x",
            volume_capabilities=[pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume())],
        ),
    ),
    (
        "DeleteVolume: volume_id is REQUIRED",
        "controller.DeleteVolume",
        lambda d: pb.DeleteVolumeRequest(),
    ),
    (
        "ControllerPublishVolume: volume_id is REQUIRED",
        "controller.ControllerPublishVolume",
        lambda d: pb.ControllerPublishVolumeRequest(node_id="node-a", volume_capability=CAP),
    ),
    (
        "ControllerPublishVolume: node_id is REQUIRED",
        "controller.ControllerPublishVolume",
        lambda d: pb.ControllerPublishVolumeRequest(
            volume_id=UNKNOWN_VOLUME, volume_capability=CAP
        ),
    ),
    (
        "ControllerPublishVolume: volume_capability is REQUIRED",
        "controller.ControllerPublishVolume",
        lambda d: pb.ControllerPublishVolumeRequest(volume_id=UNKNOWN_VOLUME, node_id="node-a"),
    ),
    (
        "ControllerUnpublishVolume: volume_id is REQUIRED",
        "controller.ControllerUnpublishVolume",
        lambda d: pb.ControllerUnpublishVolumeRequest(node_id="node-a"),
    ),
    (
        "ValidateVolumeCapabilities: volume_id is REQUIRED",
        "controller.ValidateVolumeCapabilities",
        lambda d: pb.ValidateVolumeCapabilitiesRequest(volume_capabilities=[CAP]),
    ),
    (
        "ValidateVolumeCapabilities: volume_capabilities is REQUIRED",
        "controller.ValidateVolumeCapabilities",
        lambda d: pb.ValidateVolumeCapabilitiesRequest(volume_id=UNKNOWN_VOLUME),
    ),
    (
        "NodeStageVolume: volume_id is REQUIRED",
        "node.NodeStageVolume",
        lambda d: pb.NodeStageVolumeRequest(
            staging_target_path=str(d / "s"), volume_capability=CAP
        ),
    ),
    (
        "NodeStageVolume: staging_target_path is REQUIRED",
        "node.NodeStageVolume",
        lambda d: pb.NodeStageVolumeRequest(volume_id=UNKNOWN_VOLUME, volume_capability=CAP),
    ),
    (
        "NodeStageVolume: volume_capability is REQUIRED",
        "node.NodeStageVolume",
        lambda d: pb.NodeStageVolumeRequest(
            volume_id=UNKNOWN_VOLUME, staging_target_path=str(d / "s")
        ),
    ),
    (
        "NodeUnstageVolume: volume_id is REQUIRED",
        "node.NodeUnstageVolume",
        lambda d: pb.NodeUnstageVolumeRequest(staging_target_path=str(d / "s")),
    ),
    (
        "NodeUnstageVolume: staging_target_path is REQUIRED",
        "node.NodeUnstageVolume",
        lambda d: pb.NodeUnstageVolumeRequest(volume_id=UNKNOWN_VOLUME),
    ),
    (
        "NodePublishVolume: volume_id is REQUIRED",
        "node.NodePublishVolume",
        lambda d: pb.NodePublishVolumeRequest(
            staging_target_path=str(d / "s"), target_path=str(d / "t"), volume_capability=CAP
        ),
    ),
    (
        "NodePublishVolume: target_path is REQUIRED",
        "node.NodePublishVolume",
        lambda d: pb.NodePublishVolumeRequest(
            volume_id=UNKNOWN_VOLUME, staging_target_path=str(d / "s"), volume_capability=CAP
        ),
    ),
    (
        "NodePublishVolume: volume_capability is REQUIRED",
        "node.NodePublishVolume",
        lambda d: pb.NodePublishVolumeRequest(
            volume_id=UNKNOWN_VOLUME, staging_target_path=str(d / "s"), target_path=str(d / "t")
        ),
    ),
    (
        "NodeUnpublishVolume: volume_id is REQUIRED",
        "node.NodeUnpublishVolume",
        lambda d: pb.NodeUnpublishVolumeRequest(target_path=str(d / "t")),
    ),
    (
        "NodeUnpublishVolume: target_path is REQUIRED",
        "node.NodeUnpublishVolume",
        lambda d: pb.NodeUnpublishVolumeRequest(volume_id=UNKNOWN_VOLUME),
    ),
    (
        "NodeGetVolumeStats: volume_id is REQUIRED",
        "node.NodeGetVolumeStats",
        lambda d: pb.NodeGetVolumeStatsRequest(volume_path=str(d)),
    ),
    (
        "NodeGetVolumeStats: volume_path is REQUIRED",
        "node.NodeGetVolumeStats",
        lambda d: pb.NodeGetVolumeStatsRequest(volume_id=UNKNOWN_VOLUME),
    ),
]


def _always(request: Any) -> Callable[[Path], Any]:
    """The case's builder: the same request, whatever the work directory."""
    return lambda _workdir: request


# The other RPCs with REQUIRED fields, one request each with the field left out
# (api/runtime/required.py owns the rule): (RPC, stub, the field, the request).
MISSING += [
    (f"{rpc}: {field} is REQUIRED", f"{stub}.{rpc}", _always(request))
    for rpc, stub, field, request in (
        ("NodeExpandVolume", "node", "volume_id", pb.NodeExpandVolumeRequest(volume_path="/")),
        ("NodeExpandVolume", "node", "volume_path", pb.NodeExpandVolumeRequest(volume_id="v")),
        ("ControllerGetVolume", "controller", "volume_id", pb.ControllerGetVolumeRequest()),
        (
            "ControllerModifyVolume",
            "controller",
            "volume_id",
            pb.ControllerModifyVolumeRequest(mutable_parameters={"a": "b"}),
        ),
        ("GetSnapshot", "controller", "snapshot_id", pb.GetSnapshotRequest()),
        (
            "CreateVolumeGroupSnapshot",
            "controller_group",
            "name",
            pb.CreateVolumeGroupSnapshotRequest(source_volume_ids=[UNKNOWN_VOLUME]),
        ),
        (
            "CreateVolumeGroupSnapshot",
            "controller_group",
            "source_volume_ids",
            pb.CreateVolumeGroupSnapshotRequest(name="g"),
        ),
        (
            "GetVolumeGroupSnapshot",
            "controller_group",
            "group_snapshot_id",
            pb.GetVolumeGroupSnapshotRequest(),
        ),
        (
            "DeleteVolumeGroupSnapshot",
            "controller_group",
            "group_snapshot_id",
            pb.DeleteVolumeGroupSnapshotRequest(),
        ),
    )
]


@pytest.mark.parametrize(("rule", "method", "build"), MISSING, ids=[m[0] for m in MISSING])
def test_missing_required_field_is_invalid_argument(
    layered_driver: Client, workdir: Path, rule: str, method: str, build: Callable[[Path], Any]
) -> None:
    err = h.expect_code(C.INVALID_ARGUMENT, stub_method(layered_driver, method), build(workdir))
    field = rule.split(": ", 1)[1].split(" is REQUIRED", maxsplit=1)[0]
    assert field in (err.details() or ""), "the answer names the missing field"
