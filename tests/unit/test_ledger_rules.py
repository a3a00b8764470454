"""The ledger's rules as a table: read it as documentation.

Each row: node-a already holds the volume (read-write, in MODE); then a second ControllerPublish
arrives with the same MODE, from the SAME node or ANOTHER node, read-only or not. The outcome is
what the driver must answer.
"""

from __future__ import annotations

import pytest

from csi_hostpath.core import errors, ledger_rules
from csi_hostpath.core.model import AccessMode, AccessType, Capability, Publication, Volume

M = AccessMode
MOUNT, BLOCK = AccessType.MOUNT, AccessType.BLOCK
OK, SAME_CONTEXT = "OK (new holder)", "OK (same publish_context)"
REFUSED = "FAILED_PRECONDITION (names the holder)"
CONFLICT = "ALREADY_EXISTS"
UNSUPPORTED = "INVALID_ARGUMENT"

#  mode                          type    node      readonly  outcome
TABLE: list[tuple[AccessMode, AccessType, str, bool, str]] = [
    (M.SINGLE_NODE_WRITER,        MOUNT, "same",    False, SAME_CONTEXT),
    (M.SINGLE_NODE_WRITER,        MOUNT, "same",    True,  CONFLICT),
    (M.SINGLE_NODE_WRITER,        MOUNT, "other",   False, REFUSED),
    (M.SINGLE_NODE_WRITER,        MOUNT, "other",   True,  REFUSED),
    (M.SINGLE_NODE_READER_ONLY,   MOUNT, "same",    False, SAME_CONTEXT),  # always read-only
    (M.SINGLE_NODE_READER_ONLY,   MOUNT, "same",    True,  SAME_CONTEXT),
    (M.SINGLE_NODE_READER_ONLY,   MOUNT, "other",   False, REFUSED),
    (M.SINGLE_NODE_READER_ONLY,   MOUNT, "other",   True,  REFUSED),
    (M.SINGLE_NODE_SINGLE_WRITER, MOUNT, "same",    False, SAME_CONTEXT),
    (M.SINGLE_NODE_SINGLE_WRITER, MOUNT, "same",    True,  CONFLICT),
    (M.SINGLE_NODE_SINGLE_WRITER, MOUNT, "other",   False, REFUSED),
    (M.SINGLE_NODE_SINGLE_WRITER, MOUNT, "other",   True,  REFUSED),
    (M.SINGLE_NODE_MULTI_WRITER,  MOUNT, "same",    False, SAME_CONTEXT),
    (M.SINGLE_NODE_MULTI_WRITER,  MOUNT, "same",    True,  CONFLICT),
    (M.SINGLE_NODE_MULTI_WRITER,  MOUNT, "other",   False, REFUSED),
    (M.SINGLE_NODE_MULTI_WRITER,  MOUNT, "other",   True,  REFUSED),
    (M.MULTI_NODE_READER_ONLY,    MOUNT, "same",    False, SAME_CONTEXT),
    (M.MULTI_NODE_READER_ONLY,    MOUNT, "same",    True,  SAME_CONTEXT),
    (M.MULTI_NODE_READER_ONLY,    MOUNT, "other",   False, OK),  # served read-only anyway
    (M.MULTI_NODE_READER_ONLY,    MOUNT, "other",   True,  OK),
    (M.MULTI_NODE_SINGLE_WRITER,  BLOCK, "same",    False, SAME_CONTEXT),
    (M.MULTI_NODE_SINGLE_WRITER,  BLOCK, "same",    True,  CONFLICT),
    (M.MULTI_NODE_SINGLE_WRITER,  BLOCK, "other",   False, REFUSED),  # a second writer
    (M.MULTI_NODE_SINGLE_WRITER,  BLOCK, "other",   True,  OK),       # a reader
    (M.MULTI_NODE_SINGLE_WRITER,  MOUNT, "other",   True,  UNSUPPORTED),
    (M.MULTI_NODE_MULTI_WRITER,   BLOCK, "same",    False, SAME_CONTEXT),
    (M.MULTI_NODE_MULTI_WRITER,   BLOCK, "same",    True,  CONFLICT),
    (M.MULTI_NODE_MULTI_WRITER,   BLOCK, "other",   False, OK),
    (M.MULTI_NODE_MULTI_WRITER,   BLOCK, "other",   True,  OK),
    (M.MULTI_NODE_MULTI_WRITER,   MOUNT, "other",   False, UNSUPPORTED),
]  # fmt: skip

VOLUME_ID = "vol-" + "a" * 32


def _volume(kind: AccessType) -> Volume:
    return Volume(VOLUME_ID, "v", 1 << 30, (Capability(kind, M.SINGLE_NODE_WRITER),), "ext4")


def _outcome(mode: AccessMode, kind: AccessType, node: str, readonly: bool) -> str:
    volume = _volume(kind)
    holder = Publication(
        VOLUME_ID,
        "node-a",
        mode,
        kind,
        mode in (M.SINGLE_NODE_READER_ONLY, M.MULTI_NODE_READER_ONLY),
        1,
        100.0,
    )
    node_id = "node-a" if node == "same" else "node-b"
    try:
        decision = ledger_rules.decide_publish(
            volume, node_id, Capability(kind, mode), readonly, [holder], 0, 0, 1, 200.0
        )
    except errors.PublishedElsewhere as e:
        assert "node-a" in str(e), "the refusal names the holder"
        assert "since" in str(e), "and when it took the volume"
        return REFUSED
    except errors.Incompatible:
        return CONFLICT
    except errors.Unsupported:
        return UNSUPPORTED
    if isinstance(decision, ledger_rules.AlreadyPublished):
        assert decision.publication == holder
        return SAME_CONTEXT
    assert decision.publication.generation == 2, "each publish bumps the fencing token"
    return OK


@pytest.mark.parametrize(
    ("mode", "kind", "node", "readonly", "expected"),
    TABLE,
    ids=[f"{r[0].name}-{r[1].value}-{r[2]}-{'ro' if r[3] else 'rw'}" for r in TABLE],
)
def test_ledger_table(
    mode: AccessMode, kind: AccessType, node: str, readonly: bool, expected: str
) -> None:
    assert _outcome(mode, kind, node, readonly) == expected


def test_table_covers_every_mode_node_and_readonly() -> None:
    covered = {(m, n, r) for m, _, n, r, _ in TABLE}
    for mode in M:
        if mode == M.UNKNOWN:
            continue
        for node in ("same", "other"):
            for ro in (False, True):
                assert (mode, node, ro) in covered, (mode.name, node, ro)


def test_first_publish_gets_next_generation() -> None:
    decision = ledger_rules.decide_publish(
        _volume(MOUNT), "node-a", Capability(MOUNT, M.SINGLE_NODE_WRITER), False, [], 0, 0, 41, 1.0
    )
    assert isinstance(decision, ledger_rules.Publish)
    assert decision.publication.generation == 42


def test_node_volume_limit_is_resource_exhausted_kind() -> None:
    with pytest.raises(errors.NodeVolumeLimit):
        ledger_rules.decide_publish(
            _volume(MOUNT),
            "node-a",
            Capability(MOUNT, M.SINGLE_NODE_WRITER),
            False,
            [],
            3,
            3,
            0,
            1.0,
        )


def test_block_volume_published_as_mount_is_refused() -> None:
    with pytest.raises(errors.Unsupported):
        ledger_rules.decide_publish(
            _volume(BLOCK),
            "node-a",
            Capability(MOUNT, M.SINGLE_NODE_WRITER),
            False,
            [],
            0,
            0,
            0,
            1.0,
        )


def test_reader_only_share_refuses_a_writer_in_another_mode() -> None:
    reader = Publication(VOLUME_ID, "node-a", M.MULTI_NODE_READER_ONLY, BLOCK, True, 1, 1.0)
    with pytest.raises(errors.PublishedElsewhere):
        ledger_rules.decide_publish(
            _volume(BLOCK),
            "node-b",
            Capability(BLOCK, M.MULTI_NODE_MULTI_WRITER),
            False,
            [reader],
            0,
            0,
            1,
            2.0,
        )


@pytest.mark.parametrize(
    ("age", "accept", "allowed"),
    [(5.0, False, False), (5.0, True, True), (61.0, False, True), (None, False, True)],
    ids=["fresh-heartbeat", "fresh-but-accepted", "silent-past-grace", "never-seen"],
)
def test_force_detach_waits_for_the_grace_period(
    age: float | None, accept: bool, allowed: bool
) -> None:
    holder = Publication(VOLUME_ID, "node-a", M.SINGLE_NODE_WRITER, MOUNT, False, 3, 1.0)
    if allowed:
        ledger_rules.decide_force_detach(holder, age, 60.0, accept)
    else:
        with pytest.raises(errors.NodeAlive, match="node-a"):
            ledger_rules.decide_force_detach(holder, age, 60.0, accept)


def test_revocation() -> None:
    lease = ledger_rules.Lease(VOLUME_ID, 5, {"node-b": 5})
    assert ledger_rules.is_revoked(lease, "node-a", 4)
    assert not ledger_rules.is_revoked(lease, "node-b", 5)
    assert ledger_rules.is_revoked(lease, "node-b", 4), "an older token of the same node is void"
    assert not ledger_rules.is_revoked(None, "node-b", 5), "a missing lease is unknown, not revoked"
    stale = ledger_rules.Lease(VOLUME_ID, 4, {})  # written by a slow writer before the grant of 5
    assert not ledger_rules.is_revoked(stale, "node-b", 5), (
        "a lease older than the token says nothing"
    )
    assert ledger_rules.grants(lease, "node-b", 5)
    assert not ledger_rules.grants(lease, "node-b", 4)
    assert not ledger_rules.grants(None, "node-b", 5), "staging needs a lease that says so"


# A node's silence against the grace period (60 s here). Kubernetes' external-attacher re-requests
# every VolumeAttachment that ListVolumes no longer shows (ReconcileVA in
# pkg/controller/csi_handler.go), so a silent node must get no NEW hold, or a force-detach is
# undone within one --reconcile-sync; a hold it still has is repeated as before.
SILENT = "FAILED_PRECONDITION (names the silence)"
#  heartbeat age  node holds it   outcome
SILENCE_TABLE: list[tuple[float, bool, str]] = [
    (0.0,          False,          OK),
    (59.0,         False,          OK),
    (60.0,         False,          SILENT),
    (400.0,        False,          SILENT),   # past the attach-detach controller's 6 minutes
    (0.0,          True,           SAME_CONTEXT),
    (400.0,        True,           SAME_CONTEXT),  # idempotent: nothing new is granted
]  # fmt: skip


@pytest.mark.parametrize(
    ("age", "holds", "expected"),
    SILENCE_TABLE,
    ids=[f"age{r[0]:.0f}-{'holds' if r[1] else 'new'}" for r in SILENCE_TABLE],
)
def test_a_silent_node_gets_no_new_hold(age: float, holds: bool, expected: str) -> None:
    cap = Capability(MOUNT, M.SINGLE_NODE_WRITER)
    held = Publication(VOLUME_ID, "node-a", M.SINGLE_NODE_WRITER, MOUNT, False, 1, 100.0)
    try:
        decision = ledger_rules.decide_publish(
            _volume(MOUNT),
            "node-a",
            cap,
            False,
            [held] if holds else [],
            0,
            0,
            1,
            200.0,
            heartbeat_age=age,
            node_grace=60.0,
        )
    except errors.NodeSilent as e:
        assert "node-a" in str(e) and f"{age:.0f}s" in str(e) and "grace" in str(e), e
        outcome = SILENT
    else:
        outcome = SAME_CONTEXT if isinstance(decision, ledger_rules.AlreadyPublished) else OK
    assert outcome == expected


def test_a_silent_node_is_refused_before_a_holder_elsewhere_is_named() -> None:
    """The silence is the first thing to say: a retry can't succeed until the node beats."""
    other = Publication(VOLUME_ID, "node-b", M.SINGLE_NODE_WRITER, MOUNT, False, 2, 100.0)
    with pytest.raises(errors.NodeSilent, match="node-a"):
        ledger_rules.decide_publish(
            _volume(MOUNT),
            "node-a",
            Capability(MOUNT, M.SINGLE_NODE_WRITER),
            False,
            [other],
            0,
            0,
            2,
            200.0,
            heartbeat_age=90.0,
            node_grace=60.0,
        )


# A ControllerUnpublishVolume removes node-a's row. After the kubelet's NodeUnstage the node is
# alive and lists nothing: a plain unpublish. Otherwise it is Kubernetes' own force-detach (the
# attach-detach controller's 6-minute maxWaitForUnmountDuration on an unhealthy node, or the
# out-of-service taint), audited as a revocation.
#  heartbeat age  staged there  action
UNPUBLISH_TABLE: list[tuple[float | None, bool, str]] = [
    (1.0,          False,        "unpublish"),
    (1.0,          True,         "revoke"),   # alive, never unstaged: out-of-service taint
    (400.0,        False,        "revoke"),   # silent: its unstage can't be known
    (400.0,        True,         "revoke"),   # the 6-minute force-detach of a frozen node
    (None,         False,        "revoke"),   # never heard of
]  # fmt: skip


@pytest.mark.parametrize(
    ("age", "staged", "action"),
    UNPUBLISH_TABLE,
    ids=[f"age{r[0]}-{'staged' if r[1] else 'unstaged'}" for r in UNPUBLISH_TABLE],
)
def test_unpublish_without_unstage_is_a_revocation(
    age: float | None, staged: bool, action: str
) -> None:
    held = Publication(VOLUME_ID, "node-a", M.SINGLE_NODE_WRITER, MOUNT, False, 7, 100.0)
    got, reason = ledger_rules.classify_unpublish(held, age, staged, 60.0)
    assert got == action
    if action == "revoke":
        assert "node-a" in reason and "generation 7" in reason and "NodeUnstage" in reason
        assert ("staged" in reason) == staged
    else:
        assert reason == ""


def test_fenced_stagers_are_those_staged_under_a_revoked_token() -> None:
    lease = ledger_rules.Lease("v", 5, {"node-b": 5})
    staged = {"node-a": 4, "node-b": 5, "node-c": 0}
    assert ledger_rules.fenced_stagers(lease, staged) == [("node-a", 4)], (
        "0: staged without a ledger"
    )
    assert ledger_rules.fenced_stagers(None, staged) == [], (
        "a missing lease is unknown, not revoked"
    )
    assert ledger_rules.fenced_stagers(ledger_rules.Lease("v", 5, {}), {"node-b": 5}) == [
        ("node-b", 5)
    ]
