"""csi-sanity's Controller cases: ListSnapshots, DeleteSnapshot and CreateSnapshot."""

from __future__ import annotations

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.conformance.sanity import Sanity
from tests.conformance.sanity_checks import expect_error_code, verify_snapshot_info
from tests.conformance.sanity_config import (
    MAX_NAME_LENGTH,
    unique,
    unique_with_length,
    valid_volume_id,
)
from tests.conformance.sanity_steps import need_controller

C = grpc.StatusCode


# =============================================================================================
# ListSnapshots [Controller Server]
# =============================================================================================
def _need_list_snapshots(s: Sanity) -> None:
    need_controller(s, "LIST_SNAPSHOTS", "ListSnapshots")


def _list_snapshots(
    s: Sanity, snapshot_id: str = "", source_volume_id: str = ""
) -> list[pb.Snapshot]:
    res = s.client.controller.ListSnapshots(
        pb.ListSnapshotsRequest(snapshot_id=snapshot_id, source_volume_id=source_volume_id)
    )
    return [e.snapshot for e in res.entries]


def test_list_snapshots_should_return_appropriate_values_no_optional_values_added(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return appropriate values (no optional values
    added)"""
    _need_list_snapshots(sanity)
    for snapshot in _list_snapshots(sanity):
        verify_snapshot_info(snapshot)


def test_list_snapshots_should_return_snapshots_that_match_the_specified_snapshot_id(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return snapshots that match the specified
    snapshot id"""
    _need_list_snapshots(sanity)
    # One snapshot to find and two unrelated ones that must not come back.
    sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-unrelated-s-1")),
        unique("listSnapshots-snapshot-unrelated-s-1"),
    )
    target, _ = sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-target-s")),
        unique("listSnapshots-snapshot-target-s"),
    )
    sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-unrelated-s-2")),
        unique("listSnapshots-snapshot-unrelated-s-2"),
    )
    found = _list_snapshots(sanity, snapshot_id=target.snapshot.snapshot_id)
    assert len(found) == 1
    verify_snapshot_info(found[0])
    assert found[0].snapshot_id == target.snapshot.snapshot_id


def test_list_snapshots_should_return_empty_when_the_specified_snapshot_id_does_not_exist(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return empty when the specified snapshot id
    does not exist"""
    _need_list_snapshots(sanity)
    assert _list_snapshots(sanity, snapshot_id="none-exist-id") == []


def test_list_snapshots_should_return_snapshots_that_match_the_specified_source_volume_id(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return snapshots that match the specified
    source volume id"""
    _need_list_snapshots(sanity)
    sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-unrelated-v-1")),
        unique("listSnapshots-snapshot-unrelated-v-1"),
    )
    target, _ = sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-target-v")),
        unique("listSnapshots-snapshot-target-v"),
    )
    sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-unrelated-v-2")),
        unique("listSnapshots-snapshot-unrelated-v-2"),
    )
    found = _list_snapshots(sanity, source_volume_id=target.snapshot.source_volume_id)
    assert len(found) == 1
    verify_snapshot_info(found[0])
    assert found[0].source_volume_id == target.snapshot.source_volume_id


def test_list_snapshots_should_return_empty_when_the_specified_source_volume_id_does_not_exist(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return empty when the specified source volume
    id does not exist"""
    _need_list_snapshots(sanity)
    assert _list_snapshots(sanity, source_volume_id=valid_volume_id()) == []


def test_list_snapshots_check_the_presence_of_new_snapshots_in_the_snapshot_list(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / check the presence of new snapshots in the snapshot
    list"""
    _need_list_snapshots(sanity)
    before = len(_list_snapshots(sanity))
    snap, _ = sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("listSnapshots-volume-3")),
        unique("listSnapshots-snapshot-3"),
    )
    verify_snapshot_info(snap.snapshot)
    assert len(_list_snapshots(sanity)) == before + 1
    sanity.delete_snapshot(snap.snapshot.snapshot_id)
    assert len(_list_snapshots(sanity)) == before


def test_list_snapshots_should_return_next_token_when_a_limited_number_of_entries_are_requested(
    sanity: Sanity,
) -> None:
    """ListSnapshots [Controller Server] / should return next token when a limited number of
    entries are requested"""
    _need_list_snapshots(sanity)
    min_count, max_entries = 5, 2
    total = len(_list_snapshots(sanity))
    for i in range(1, min_count - total + 1):
        snap, _ = sanity.must_create_snapshot_from_volume(
            sanity.create_volume_request(unique(f"volume{i}")), unique(f"snapshot{i}")
        )
        verify_snapshot_info(snap.snapshot)
    total = max(total, min_count)

    first = sanity.client.controller.ListSnapshots(pb.ListSnapshotsRequest(max_entries=max_entries))
    assert len(first.entries) == max_entries
    # The token alone, with no max_entries: every remaining snapshot at once.
    rest = sanity.client.controller.ListSnapshots(
        pb.ListSnapshotsRequest(starting_token=first.next_token)
    )
    assert len(rest.entries) == total - max_entries


# =============================================================================================
# DeleteSnapshot [Controller Server]
# =============================================================================================
def test_delete_snapshot_should_fail_when_no_snapshot_id_is_provided(sanity: Sanity) -> None:
    """DeleteSnapshot [Controller Server] / should fail when no snapshot id is provided"""
    need_controller(sanity, "CREATE_DELETE_SNAPSHOT", "DeleteSnapshot")
    expect_error_code(
        C.INVALID_ARGUMENT, sanity.client.controller.DeleteSnapshot, pb.DeleteSnapshotRequest()
    )


def test_delete_snapshot_should_succeed_when_an_invalid_snapshot_id_is_used(
    sanity: Sanity,
) -> None:
    """DeleteSnapshot [Controller Server] / should succeed when an invalid snapshot id is used"""
    need_controller(sanity, "CREATE_DELETE_SNAPSHOT", "DeleteSnapshot")
    sanity.delete_snapshot("reallyfakesnapshotid")


def test_delete_snapshot_should_return_appropriate_values_no_optional_values_added(
    sanity: Sanity,
) -> None:
    """DeleteSnapshot [Controller Server] / should return appropriate values (no optional values
    added)"""
    need_controller(sanity, "CREATE_DELETE_SNAPSHOT", "DeleteSnapshot")
    vol = sanity.create_volume(sanity.create_volume_request(unique("DeleteSnapshot-volume-1")))
    # The deletion itself is csi-sanity's cleanup, which must succeed.
    sanity.must_create_snapshot(
        sanity.create_snapshot_request(unique("DeleteSnapshot-snapshot-1"), vol.volume.volume_id)
    )


# =============================================================================================
# CreateSnapshot [Controller Server]
# =============================================================================================
def _need_create_snapshot(s: Sanity) -> None:
    need_controller(s, "CREATE_DELETE_SNAPSHOT", "CreateSnapshot")


def test_create_snapshot_should_fail_when_no_name_is_provided(sanity: Sanity) -> None:
    """CreateSnapshot [Controller Server] / should fail when no name is provided"""
    _need_create_snapshot(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT,
        sanity.create_snapshot,
        pb.CreateSnapshotRequest(source_volume_id="testId"),
    )


def test_create_snapshot_should_fail_when_no_source_volume_id_is_provided(
    sanity: Sanity,
) -> None:
    """CreateSnapshot [Controller Server] / should fail when no source volume id is provided"""
    _need_create_snapshot(sanity)
    expect_error_code(
        C.INVALID_ARGUMENT, sanity.create_snapshot, pb.CreateSnapshotRequest(name="name")
    )


def test_create_snapshot_should_succeed_when_requesting_same_name_and_same_source_volume_id(
    sanity: Sanity,
) -> None:
    """CreateSnapshot [Controller Server] / should succeed when requesting to create a snapshot
    with already existing name and same source volume ID"""
    _need_create_snapshot(sanity)
    vol = sanity.must_create_volume(sanity.create_volume_request(unique("CreateSnapshot-volume-1")))
    request = sanity.create_snapshot_request(
        unique("CreateSnapshot-snapshot-1"), vol.volume.volume_id
    )
    sanity.must_create_snapshot(request)
    sanity.must_create_snapshot(request)


def test_create_snapshot_should_fail_when_requesting_same_name_and_different_source_volume_id(
    sanity: Sanity,
) -> None:
    """CreateSnapshot [Controller Server] / should fail when requesting to create a snapshot
    with already existing name and different source volume ID"""
    _need_create_snapshot(sanity)
    name = unique("CreateSnapshot-snapshot-2")
    sanity.must_create_snapshot_from_volume(
        sanity.create_volume_request(unique("CreateSnapshot-volume-2")), name
    )
    other = sanity.must_create_volume(
        sanity.create_volume_request(unique("CreateSnapshot-volume-3"))
    )
    expect_error_code(
        C.ALREADY_EXISTS,
        sanity.create_snapshot,
        sanity.create_snapshot_request(name, other.volume.volume_id),
    )


def test_create_snapshot_should_succeed_when_creating_snapshot_with_maximum_length_name(
    sanity: Sanity,
) -> None:
    """CreateSnapshot [Controller Server] / should succeed when creating snapshot with
    maximum-length name"""
    _need_create_snapshot(sanity)
    vol = sanity.must_create_volume(
        sanity.create_volume_request(unique("CreateSnapshot-volume-maxlen-name"))
    )
    name = unique_with_length("CreateSnapshot-snapshot-maxlen", MAX_NAME_LENGTH)
    assert len(name) == MAX_NAME_LENGTH
    request = sanity.create_snapshot_request(name, vol.volume.volume_id)
    sanity.must_create_snapshot(request)
    sanity.must_create_snapshot(request)
