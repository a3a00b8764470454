"""Spec rules for every RPC over gRPC, on both system layers (layered_driver).

Idempotent repeats, ALREADY_EXISTS, capacity, access modes, pagination, identity and node paths.
Each names the rule of CSI v1.12.0 spec.md it checks; each runs on the fake layer (make unit) and
the real one (root). Required fields are in test_rpc_required_fields.py, NOT_FOUND in
test_rpc_not_found.py."""

from __future__ import annotations

from pathlib import Path

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client
from tests.support import helpers as h
from tests.unit.rpc_rule_cases import CAP, UNKNOWN_VOLUME

C = grpc.StatusCode


# ---- Idempotency: "a retry with the same arguments returns the same success" (spec.md
# "Concurrency" and each RPC's idempotency paragraph) ----
def test_every_rpc_repeated_returns_the_same_success(layered_driver: Client, workdir: Path) -> None:
    req = pb.CreateVolumeRequest(
        name="again",
        volume_capabilities=[CAP],
        capacity_range=pb.CapacityRange(required_bytes=32 * h.MiB),
    )
    first = layered_driver.controller.CreateVolume(req).volume
    second = layered_driver.controller.CreateVolume(req).volume
    assert first == second, "CreateVolume: same name and arguments → the same volume"

    ctx1 = h.publish(layered_driver, first.volume_id, "node-a", CAP)
    ctx2 = h.publish(layered_driver, first.volume_id, "node-a", CAP)
    assert ctx1 == ctx2, "ControllerPublishVolume: repeated → the same publish_context"

    staging, target = workdir / "st", workdir / "tg"
    staging.mkdir()
    for _ in range(2):
        h.stage(layered_driver, first, staging, CAP, ctx1)
    for _ in range(2):
        h.node_publish(layered_driver, first.volume_id, staging, target, CAP)
    assert layered_driver.mounted(target)
    stats = [
        layered_driver.node.NodeGetVolumeStats(
            pb.NodeGetVolumeStatsRequest(volume_id=first.volume_id, volume_path=str(target))
        )
        for _ in range(2)
    ]
    assert stats[0].usage[0].total == stats[1].usage[0].total > 0
    for _ in range(2):
        h.node_unpublish(layered_driver, first.volume_id, target)
    for _ in range(2):
        h.unstage(layered_driver, first.volume_id, staging)
    for _ in range(2):
        h.unpublish(layered_driver, first.volume_id, "node-a")
    for _ in range(2):
        h.delete(layered_driver, first.volume_id)
    # Unknown IDs are already gone: DeleteVolume, ControllerUnpublish, NodeUnstage and
    # NodeUnpublish all answer OK ("the volume is already in the desired state").
    h.delete(layered_driver, UNKNOWN_VOLUME)
    h.unpublish(layered_driver, UNKNOWN_VOLUME, "node-a")
    h.unstage(layered_driver, UNKNOWN_VOLUME, staging)
    h.node_unpublish(layered_driver, UNKNOWN_VOLUME, target)


def test_create_same_name_different_size_is_already_exists(layered_driver: Client) -> None:
    """CreateVolume: 'Volume already exists but is incompatible' → ALREADY_EXISTS."""
    h.create(layered_driver, "clash", CAP, 32 * h.MiB)
    h.expect_code(C.ALREADY_EXISTS, h.create, layered_driver, "clash", CAP, 128 * h.MiB)
    h.expect_code(C.ALREADY_EXISTS, h.create, layered_driver, "clash", h.block_cap(), 32 * h.MiB)


def test_capacity_rules(layered_driver: Client) -> None:
    """CreateVolume: 'Unsupported capacity_range' → OUT_OF_RANGE; report the real capacity."""

    def create_range(required: int, limit: int) -> pb.Volume:
        reply: pb.CreateVolumeResponse = layered_driver.controller.CreateVolume(
            pb.CreateVolumeRequest(
                name=f"r{required}-{limit}",
                volume_capabilities=[CAP],
                capacity_range=pb.CapacityRange(required_bytes=required, limit_bytes=limit),
            )
        )
        return reply.volume

    h.expect_code(C.OUT_OF_RANGE, create_range, 64 * h.MiB, 32 * h.MiB)
    h.expect_code(C.OUT_OF_RANGE, create_range, 0, 1 * h.MiB)  # below the ext4 minimum
    vol = create_range(20 * h.MiB + 1, 0)
    assert vol.capacity_bytes == 21 * h.MiB
    vol = create_range(0, 0)
    assert vol.capacity_bytes > 0


def test_mnmw_on_a_filesystem_is_refused(layered_driver: Client) -> None:
    """Two nodes mounting one ext4 corrupt it: MULTI_NODE_MULTI_WRITER with a mount capability
    → INVALID_ARGUMENT at create, and not confirmed by ValidateVolumeCapabilities."""
    mnmw_fs = h.mount_cap("ext4", mode=h.Mode.MULTI_NODE_MULTI_WRITER)
    h.expect_code(C.INVALID_ARGUMENT, h.create, layered_driver, "mnmw", mnmw_fs)
    vol = h.create(layered_driver, "mnmw-block", h.block_cap(h.Mode.MULTI_NODE_MULTI_WRITER))
    vol2 = h.create(layered_driver, "fs", CAP, 32 * h.MiB)
    reply = layered_driver.controller.ValidateVolumeCapabilities(
        pb.ValidateVolumeCapabilitiesRequest(
            volume_id=vol2.volume_id, volume_capabilities=[mnmw_fs]
        )
    )
    assert not reply.HasField("confirmed") and reply.message
    assert vol.volume_id


def test_list_volumes_paginates_and_rejects_bad_tokens(layered_driver: Client) -> None:
    """ListVolumes: max_entries/next_token; 'Invalid starting_token' → ABORTED."""
    made = [
        h.create(layered_driver, f"page-{i}", h.block_cap(), 4 * h.MiB).volume_id for i in range(5)
    ]
    seen, token = [], ""
    while True:
        reply = layered_driver.controller.ListVolumes(
            pb.ListVolumesRequest(max_entries=2, starting_token=token)
        )
        assert len(reply.entries) <= 2
        seen += [e.volume.volume_id for e in reply.entries]
        token = reply.next_token
        if not token:
            break
    assert seen == made
    h.expect_code(
        C.ABORTED,
        layered_driver.controller.ListVolumes,
        pb.ListVolumesRequest(starting_token="not-a-token"),
    )


def test_identity_and_capabilities(layered_driver: Client) -> None:
    info = layered_driver.identity.GetPluginInfo(pb.GetPluginInfoRequest())
    assert info.name == "loop.hostpath.csi.dev" and info.vendor_version
    assert layered_driver.identity.Probe(pb.ProbeRequest()).ready.value is True
    caps = layered_driver.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    types = {c.service.type for c in caps.capabilities}
    assert pb.PluginCapability.Service.CONTROLLER_SERVICE in types
    assert pb.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS in types
    node_info = layered_driver.node.NodeGetInfo(pb.NodeGetInfoRequest())
    assert node_info.node_id == "node-a"
    assert dict(node_info.accessible_topology.segments) == {
        "topology.loop.hostpath.csi.dev/node": "node-a"
    }
    capacity = layered_driver.controller.GetCapacity(pb.GetCapacityRequest())
    assert capacity.available_capacity > 0


def test_node_publish_without_staging_is_failed_precondition(
    layered_driver: Client, workdir: Path
) -> None:
    """NodePublishVolume: STAGE_UNSTAGE_VOLUME is advertised but the volume was not staged
    → FAILED_PRECONDITION."""
    vol = h.create(layered_driver, "unstaged", CAP, 32 * h.MiB)
    h.expect_code(
        C.FAILED_PRECONDITION,
        h.node_publish,
        layered_driver,
        vol.volume_id,
        workdir / "nowhere",
        workdir / "t",
        CAP,
    )


def test_rwop_allows_one_target_rwo_allows_many(layered_driver: Client, workdir: Path) -> None:
    """SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod): a second target → FAILED_PRECONDITION.
    SINGLE_NODE_WRITER (RWO): several targets on the one node are fine."""
    for mode, name in (
        (h.Mode.SINGLE_NODE_SINGLE_WRITER, "rwop"),
        (h.Mode.SINGLE_NODE_WRITER, "rwo"),
    ):
        cap = h.mount_cap("ext4", mode=mode)
        vol = h.create(layered_driver, name, cap, 32 * h.MiB)
        ctx = h.publish(layered_driver, vol.volume_id, "node-a", cap)
        staging = workdir / name / "st"
        staging.mkdir(parents=True)
        h.stage(layered_driver, vol, staging, cap, ctx)
        h.node_publish(layered_driver, vol.volume_id, staging, workdir / name / "pod1", cap)
        if name == "rwop":
            h.expect_code(
                C.FAILED_PRECONDITION,
                h.node_publish,
                layered_driver,
                vol.volume_id,
                staging,
                workdir / name / "pod2",
                cap,
            )
        else:
            h.node_publish(layered_driver, vol.volume_id, staging, workdir / name / "pod2", cap)
            if (
                not layered_driver.on_fake
            ):  # the fake's mounts are records; only the kernel shares data
                (workdir / name / "pod1" / "f").write_text("shared")
                assert (workdir / name / "pod2" / "f").read_text() == "shared"
            h.node_unpublish(layered_driver, vol.volume_id, workdir / name / "pod2")
        h.node_unpublish(layered_driver, vol.volume_id, workdir / name / "pod1")
        h.unstage(layered_driver, vol.volume_id, staging)


def test_same_target_different_readonly_is_already_exists(
    layered_driver: Client, workdir: Path
) -> None:
    """NodePublishVolume: 'Volume published but is incompatible' → ALREADY_EXISTS."""
    vol, staging, target = h.in_use(layered_driver, workdir, "tgt", CAP)
    h.expect_code(
        C.ALREADY_EXISTS,
        h.node_publish,
        layered_driver,
        vol.volume_id,
        staging,
        target,
        CAP,
        readonly=True,
    )
    h.release(layered_driver, vol.volume_id, staging, target)


def test_paths_inside_the_drivers_state_directory_are_refused(
    layered_driver: Client, workdir: Path
) -> None:
    """The CO's staging and target paths never lie in the driver's own state directory, where
    inline volumes and the store live."""
    vol = h.create(layered_driver, "inside", CAP, 32 * h.MiB)
    ctx = h.publish(layered_driver, vol.volume_id, "node-a", CAP)
    inside = workdir / "drv-state" / "ephemeral" / f"{vol.volume_id}.mnt"
    h.expect_code(C.INVALID_ARGUMENT, h.stage, layered_driver, vol, inside, CAP, ctx)
    h.expect_code(
        C.INVALID_ARGUMENT,
        h.node_publish,
        layered_driver,
        vol.volume_id,
        workdir / "st",
        workdir / "drv-state" / "x",
        CAP,
    )
