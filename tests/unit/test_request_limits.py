"""CSI's size limits and the text rules in the call pipeline (api/runtime/limits.py).

spec.md "Size Limits": 128 bytes a string field, 4 KiB a map. Beyond them, and for a control
character in a name, an ID or a parameter, the answer is INVALID_ARGUMENT before anything is
stored; a path is bound by PATH_MAX instead. An unknown class parameter is refused by name."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.api.runtime import limits
from csi_hostpath.client import csi_requests as rq
from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.core.request_text import MAX_PATH_BYTES, shown
from tests.conftest import Client
from tests.support import helpers as h

C = grpc.StatusCode
MiB = 1 << 20
CAP = h.mount_cap()
FORGED = "innocent\n2026-12-07 19:52:00  operator force-detach vol-" + "0" * 32


def _create(client: Client, name: str, **kw: object) -> pb.Volume:
    return h.create(client, name, CAP, size=MiB, **kw)


def test_a_name_of_128_bytes_is_taken_and_one_more_byte_is_refused(fake_driver: Client) -> None:
    assert _create(fake_driver, "n" * 128).volume_id
    err = h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, "n" * 129)
    assert "name is 129 bytes; CSI allows at most 128" in str(err.details())
    # Bytes, not characters: 43 three-byte characters are 129 bytes.
    h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, "€" * 43)


def test_a_100_kb_name_is_refused_without_echoing_it(fake_driver: Client) -> None:
    err = h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, "x" * 100_000)
    assert len(str(err.details())) < 200


@pytest.mark.parametrize("bad", ["\n", "\x00", "\x1b[2J", "\x7f", "\x85", "\t"])
def test_a_control_character_in_a_name_is_refused(fake_driver: Client, bad: str) -> None:
    err = h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, f"innocent{bad}x")
    assert "name holds a control character" in str(err.details())


def test_the_forged_audit_line_is_refused_as_a_name(fake_driver: Client) -> None:
    h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, FORGED)
    snapshot = pb.CreateSnapshotRequest(name=FORGED, source_volume_id="vol-" + "0" * 32)
    h.expect_code(C.INVALID_ARGUMENT, fake_driver.controller.CreateSnapshot, snapshot)


def test_an_id_with_a_control_character_is_refused_even_where_unknown_is_ok(
    fake_driver: Client,
) -> None:
    # DeleteVolume of an unknown ID is OK; one that can't be an ID at all is not taken.
    delete = fake_driver.controller.DeleteVolume
    h.expect_code(C.INVALID_ARGUMENT, delete, rq.delete_volume("vol-1\nforged"))
    h.expect_code(C.INVALID_ARGUMENT, delete, rq.delete_volume("v" * 129))


def test_unknown_storage_class_parameters_are_refused_by_name(fake_driver: Client) -> None:
    err = h.expect_code(
        C.INVALID_ARGUMENT, _create, fake_driver, "p", parameters={"zeta": "1", "alpha": "2"}
    )
    assert 'unknown StorageClass parameter "alpha", "zeta"' in str(err.details())


def test_the_cos_own_parameters_are_taken(fake_driver: Client) -> None:
    co = {
        "csi.storage.k8s.io/pvc/name": "data",
        "csi.storage.k8s.io/pvc/namespace": "default",
        "csi.storage.k8s.io/pv/name": "pvc-1234",
    }
    assert _create(fake_driver, "co", parameters=co).volume_id


def test_unknown_snapshot_class_parameters_are_refused(fake_driver: Client) -> None:
    volume = _create(fake_driver, "src")
    request = pb.CreateSnapshotRequest(
        name="s", source_volume_id=volume.volume_id, parameters={"tier": "gold"}
    )
    err = h.expect_code(C.INVALID_ARGUMENT, fake_driver.controller.CreateSnapshot, request)
    assert 'unknown VolumeSnapshotClass parameter "tier"' in str(err.details())


def test_a_group_snapshot_class_with_the_e2e_suites_parameter_is_taken(
    fake_driver: Client,
) -> None:
    """Kubernetes' own external storage suite makes its VolumeGroupSnapshotClass with
    `deletionPolicy` among the parameters (test/e2e/storage/testsuites/
    volume_group_snapshottable.go, CreateVolumeGroupSnapshotResource's last argument), and the
    csi-snapshotter hands them to the driver: refusing the key left the group snapshot pending
    for ever on kind. A group class's parameters are measured and escaped, never refused."""
    volume = _create(fake_driver, "member")
    request = pb.CreateVolumeGroupSnapshotRequest(
        name="group-e2e",
        source_volume_ids=[volume.volume_id],
        parameters={"deletionPolicy": "Delete"},
    )
    reply = fake_driver.controller_group.CreateVolumeGroupSnapshot(request)
    assert reply.group_snapshot.ready_to_use
    bad = pb.CreateVolumeGroupSnapshotRequest(
        name="group-bad", source_volume_ids=[volume.volume_id], parameters={"k": "a\nb"}
    )
    h.expect_code(C.INVALID_ARGUMENT, fake_driver.controller_group.CreateVolumeGroupSnapshot, bad)


def test_a_parameter_map_over_4_kib_is_refused(fake_driver: Client) -> None:
    big = {f"csi.storage.k8s.io/k{i}": "v" * 100 for i in range(40)}  # 40 * ~122 bytes
    err = h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, "big", parameters=big)
    assert "parameters is" in str(err.details()) and "at most 4096" in str(err.details())


def test_a_control_character_in_a_parameter_value_is_refused(fake_driver: Client) -> None:
    params = {"csi.storage.k8s.io/pvc/name": "a\nb"}
    err = h.expect_code(C.INVALID_ARGUMENT, _create, fake_driver, "cv", parameters=params)
    assert "parameters[csi.storage.k8s.io/pvc/name] holds a control character" in str(err.details())


def test_secrets_are_measured_but_their_text_is_theirs() -> None:
    request = rq.delete_volume("vol-" + "0" * 32)
    request.secrets["key"] = "-----BEGIN KEY-----\nabc\n-----END KEY-----"
    limits.check(request)  # a multi-line secret is a fine secret
    request.secrets["big"] = "s" * 5000
    with pytest.raises(InvalidRequest, match="secrets is 50"):
        limits.check(request)


def test_a_path_is_bound_by_path_max_not_by_128_bytes() -> None:
    long_path = "/var/lib/kubelet/plugins/kubernetes.io/csi/loop.hostpath.csi.dev/" + "a" * 200
    limits.check(rq.node_unpublish("vol-" + "0" * 32, long_path))
    with pytest.raises(InvalidRequest, match="a path is at most 4095"):
        limits.check(rq.node_unpublish("vol-" + "0" * 32, "/" + "a" * MAX_PATH_BYTES))
    with pytest.raises(InvalidRequest, match="NUL"):
        limits.check(rq.node_unpublish("vol-" + "0" * 32, "/tmp/a\x00b"))


def test_nested_fields_are_measured_too() -> None:
    cap = pb.VolumeCapability()
    cap.CopyFrom(CAP)
    cap.mount.mount_flags.append("noatime\nforged")
    with pytest.raises(InvalidRequest, match=r"volume_capabilities\.mount\.mount_flags"):
        limits.check(pb.CreateVolumeRequest(name="x", volume_capabilities=[cap]))


def test_shown_keeps_request_text_on_one_line() -> None:
    assert "\n" not in shown(FORGED)
    assert shown(FORGED).startswith("innocent\\n2026-12-07")
    assert shown("a\\nb") == "a\\\\nb"  # an escape is never mistaken for one
    assert shown("\x1b[2J\x85\u2028") == "\\x1b[2J\\x85\\u2028"
    cut = shown("x" * 100_000)
    assert len(cut) < 300 and cut.endswith("...(100000 chars)")
