"""Driver bugs found by the end-to-end work and the fuzz, each kept as its regression test.

A new bug goes here first as a strict xfail (and, if the fuzz must step around it meanwhile, as an
entry in KNOWN_BUGS of bad_input/known_bugs.py); the fix removes both.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, DriverProcess
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under

C = grpc.StatusCode
MiB = h.MiB


@pytest.fixture
def node_id() -> str:
    # Our own node ID: see test_two_drivers_with_one_node_id_keep_their_loop_devices.
    return f"bugs-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def drv(spawn: Any, node_id: str) -> Client:
    """A real `--mode all` driver process in local scope."""
    started: tuple[DriverProcess, Client | None] = spawn("drv", node_id=node_id)
    _handle, client = started
    assert client is not None
    return client


def _staged(drv: Client, workdir: Path, node_id: str, cap: Any) -> tuple[pb.Volume, Path, Path]:
    vol = h.create(drv, "staged", cap, 32 * MiB)
    ctx = h.publish(drv, vol.volume_id, node_id, cap)
    staging, target = workdir / "staging", workdir / "target"
    staging.mkdir()
    h.stage(drv, vol, staging, cap, ctx)
    h.node_publish(drv, vol.volume_id, staging, target, cap)
    return vol, staging, target


def _code(call: Callable[[], Any]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as e:
        return e.code()
    return C.OK


@pytest.mark.parametrize("rpc", ["ListVolumes", "ListSnapshots"])
def test_page_token_of_non_decimal_digits_is_aborted(drv: Client, rpc: str) -> None:
    request = getattr(pb, f"{rpc}Request")(starting_token="²")
    h.expect_code(C.ABORTED, getattr(drv.controller, rpc), request)


# 4000 digits: as long as a publish_context within CSI's 4 KiB can carry; 5000 make the map
# too large, which the api edge refuses before the generation is read.
@pytest.mark.parametrize(
    ("generation", "code"),
    [
        ("²", C.FAILED_PRECONDITION),
        ("1" * 4000, C.FAILED_PRECONDITION),
        ("1" * 5000, C.INVALID_ARGUMENT),
    ],
    ids=["superscript", "4000-digits", "5000-digits"],
)
def test_stage_with_an_unreadable_generation_is_failed_precondition(
    drv: Client, workdir: Path, node_id: str, generation: str, code: grpc.StatusCode
) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(drv, "gen", cap, 32 * MiB)
    h.publish(drv, vol.volume_id, node_id, cap)
    staging = workdir / "staging"
    h.expect_code(code, h.stage, drv, vol, staging, cap, {"generation": generation})


def test_stage_with_a_mount_flag_mount_refuses_is_invalid_and_leaks_nothing(
    drv: Client, workdir: Path, node_id: str
) -> None:
    cap = h.mount_cap("ext4", flags=("no-such-mount-option",))
    vol = h.create(drv, "flags", cap, 32 * MiB)
    ctx = h.publish(drv, vol.volume_id, node_id, cap)
    code = _code(lambda: h.stage(drv, vol, workdir / "staging", cap, ctx))
    leaked = loops_backed_under(workdir)
    assert (code, leaked) == (C.INVALID_ARGUMENT, [])


def test_inline_volume_of_impossible_size_is_refused_cleanly(
    spawn: Any, workdir: Path, node_id: str
) -> None:
    _handle, drv = spawn("drv", "--allow-inline-volumes", node_id=node_id)
    request = pb.NodePublishVolumeRequest(
        volume_id="csi-inline-huge",
        target_path=str(workdir / "pod" / "mount"),
        volume_capability=h.mount_cap(""),
        volume_context={"csi.storage.k8s.io/ephemeral": "true", "size": "9" * 20 + "Ti"},
    )
    code = _code(lambda: drv.node.NodePublishVolume(request))
    left = [
        name
        for d in (workdir / "drv-state" / "ephemeral", workdir / "drv-state" / "pool" / "inline")
        for _, _, names in os.walk(d)
        for name in names
    ]
    assert code in (C.OUT_OF_RANGE, C.INVALID_ARGUMENT, C.RESOURCE_EXHAUSTED) and not left, (
        code,
        left,
    )


def test_unstage_at_another_path_leaves_the_staged_volume_alone(
    drv: Client, workdir: Path, node_id: str
) -> None:
    cap = h.mount_cap("ext4")
    vol, staging, target = _staged(drv, workdir, node_id, cap)
    # Spec: "If the volume ... is not staged to the staging_target_path, the Plugin MUST reply
    # 0 OK" -- and leave it staged where it is.
    h.unstage(drv, vol.volume_id, workdir / "elsewhere")
    assert h.mounted(staging)
    stats = drv.node.NodeGetVolumeStats(
        pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=str(target))
    )
    assert not stats.volume_condition.abnormal, stats
    h.node_publish(drv, vol.volume_id, staging, workdir / "second-target", cap)


@pytest.mark.parametrize(
    "case", ["block-onto-directory", "mount-onto-file", "mount-under-file", "stage-under-file"]
)
def test_a_path_of_the_wrong_type_is_refused_cleanly(
    drv: Client, workdir: Path, node_id: str, case: str
) -> None:
    block = case == "block-onto-directory"
    cap = h.block_cap() if block else h.mount_cap("ext4")
    vol = h.create(drv, "typed", cap, 32 * MiB)
    ctx = h.publish(drv, vol.volume_id, node_id, cap)
    (workdir / "directory").mkdir()
    (workdir / "file").write_text("a regular file")
    staging = workdir / "file" / "staging" if case == "stage-under-file" else workdir / "staging"
    code = _code(lambda: h.stage(drv, vol, staging, cap, ctx))
    if case != "stage-under-file":
        assert code == C.OK
        target = {
            "block-onto-directory": workdir / "directory",
            "mount-onto-file": workdir / "file",
            "mount-under-file": workdir / "file" / "target",
        }[case]
        code = _code(lambda: h.node_publish(drv, vol.volume_id, staging, target, cap))
    leaked = loops_backed_under(workdir) if case == "stage-under-file" else []
    assert code in (C.INVALID_ARGUMENT, C.FAILED_PRECONDITION, C.ALREADY_EXISTS), code
    assert not leaked


@pytest.mark.parametrize("busy", ["process-inside", "mount-beneath"])
def test_unpublish_of_a_busy_target_is_a_spec_code(
    drv: Client, workdir: Path, node_id: str, busy: str
) -> None:
    cap = h.mount_cap("ext4")
    vol, _staging, target = _staged(drv, workdir, node_id, cap)
    holder = None
    if busy == "process-inside":
        holder = subprocess.Popen(["sleep", "60"], cwd=target)
    else:
        (target / "beneath").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "beneath", str(target / "beneath")], check=True)
    try:
        code = _code(lambda: h.node_unpublish(drv, vol.volume_id, target))
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        subprocess.run(["umount", "-l", str(target / "beneath")], capture_output=True, check=False)
    assert code in (C.FAILED_PRECONDITION, C.ABORTED), code


@pytest.fixture
def foreign_mount(workdir: Path) -> Path:
    """A tmpfs the driver never mounted (the workdir fixture unmounts it in the end)."""
    point = workdir / "foreign"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "csihp-foreign", str(point)], check=True)
    (point / "precious").write_text("not the driver's")
    return point


@pytest.mark.parametrize("rpc", ["NodeUnstageVolume", "NodeUnpublishVolume"])
def test_unknown_volume_teardown_leaves_a_foreign_mount_alone(
    drv: Client, foreign_mount: Path, rpc: str
) -> None:
    unknown = "vol-" + "1" * 32
    if rpc == "NodeUnstageVolume":
        h.unstage(drv, unknown, foreign_mount)
    else:
        h.node_unpublish(drv, unknown, foreign_mount)
    assert h.mounted(foreign_mount), f"{rpc} of a volume it never had unmounted a foreign mount"
    assert (foreign_mount / "precious").read_text() == "not the driver's"


def test_publish_onto_a_foreign_mount_does_not_pretend(
    drv: Client, workdir: Path, node_id: str, foreign_mount: Path
) -> None:
    cap = h.mount_cap("ext4")
    vol = h.create(drv, "covered", cap, 32 * MiB)
    ctx = h.publish(drv, vol.volume_id, node_id, cap)
    staging = workdir / "staging"
    h.stage(drv, vol, staging, cap, ctx)
    code = _code(lambda: h.node_publish(drv, vol.volume_id, staging, foreign_mount, cap))
    if code == C.OK:  # then the volume must really be what the pod sees there
        assert not (foreign_mount / "precious").exists(), "the pod sees the foreign filesystem"
        assert os.statvfs(foreign_mount).f_blocks * os.statvfs(foreign_mount).f_frsize <= 32 * MiB
    else:
        assert code in (C.FAILED_PRECONDITION, C.ALREADY_EXISTS), code


def test_two_drivers_with_one_node_id_keep_their_loop_devices(
    spawn: Any, workdir: Path, node_id: str
) -> None:
    """Found by this work and fixed in the driver meanwhile (commit 985d924: reconcile drops only
    devices backed by its own pool); kept as the regression test. Loop devices are tagged by
    node ID alone, so a second installation with the same node ID on one kernel (two kind
    clusters on one host, two test runs) used to take the first one's devices for its own leaks
    and detach them when it started."""
    _h1, one = spawn("one", node_id=node_id)
    cap = h.block_cap()
    vol = h.create(one, "raw", cap, 16 * MiB)
    ctx = h.publish(one, vol.volume_id, node_id, cap)
    staging, target = workdir / "one-staging", workdir / "one-target"
    h.stage(one, vol, staging, cap, ctx)
    h.node_publish(one, vol.volume_id, staging, target, cap)
    assert len(loops_backed_under(workdir / "one-state")) == 1

    # Another installation with its own state and pool, and a node of the same name, starts.
    spawn("two", node_id=node_id)
    assert len(loops_backed_under(workdir / "one-state")) == 1, "the first driver lost its device"
    stats = one.node.NodeGetVolumeStats(
        pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id, volume_path=str(target))
    )
    assert not stats.volume_condition.abnormal, stats


def test_expand_with_only_a_lower_limit_never_shrinks_the_record(drv: Client) -> None:
    vol = h.create(drv, "grow", h.mount_cap("ext4"), 64 * MiB)
    request = pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume_id, capacity_range=pb.CapacityRange(limit_bytes=32 * MiB)
    )
    try:
        answered = drv.controller.ControllerExpandVolume(request).capacity_bytes
    except grpc.RpcError as e:
        assert e.code() == C.OUT_OF_RANGE, e
        answered = 64 * MiB
    got = drv.controller.ControllerGetVolume(pb.ControllerGetVolumeRequest(volume_id=vol.volume_id))
    assert answered >= 64 * MiB
    assert got.volume.capacity_bytes == 64 * MiB
    assert not got.status.volume_condition.abnormal, got.status.volume_condition.message
