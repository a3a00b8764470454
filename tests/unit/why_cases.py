"""The eight cases `kubectl csi-hostpath why` must explain, each a cluster state (the objects of
tests/unit/why_shapes.py), the question asked, the blocker's code and the words its reason line
must hold."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.unit.why_shapes import (
    NOW,
    VOL,
    VOL2,
    Obj,
    at,
    attachment,
    claim,
    csidriver,
    csinode,
    event,
    held,
    node,
    pod,
    row,
    staged,
    storage_class,
    target,
    view,
    volume,
)


@dataclass
class Case:
    name: str
    ask: str  # "pod/NAME" or "pvc/NAME"
    code: str  # the blocker's code
    words: tuple[str, ...]  # what the reason line must say
    objects: list[Obj] = field(default_factory=list)
    ledger: dict[str, Obj] = field(default_factory=dict)


def _cluster() -> list[Obj]:
    return [
        node("w1"),
        node("w2"),
        csinode("w1"),
        csinode("w2"),
        csidriver(),
        storage_class("csi-hostpath"),
        storage_class("csi-hostpath-wffc", "WaitForFirstConsumer"),
    ]


def first_consumer() -> Case:
    late = claim("late", 100, sc="csi-hostpath-wffc")
    waits = event(
        late,
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
        590,
        "Normal",
    )
    return Case(
        "first-consumer",
        "pvc/late",
        "waiting-for-first-consumer",
        ("claim late waits for its first consumer", "WaitForFirstConsumer"),
        [*_cluster(), late, waits],
    )


def no_capacity() -> Case:
    huge = claim("huge", 100, size="100Ti")
    wants = pod(
        "wants-huge",
        [("data", "huge")],
        created=100,
        scheduled_message="0/3 nodes are available: pod has unbound immediate "
        "PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not "
        "helpful for scheduling.",
    )
    said = (
        'failed to provision volume with StorageClass "csi-hostpath": rpc error: code = '
        "ResourceExhausted desc = the pool can promise 37.2Gi more (free space, minus what "
        "existing thin volumes may still grow into, times --overcommit-ratio 1); 100Ti was "
        "asked for"
    )
    return Case(
        "no-capacity",
        "pod/wants-huge",
        "no-capacity",
        ("no node has the capacity asked for", "100Ti", "the pool can promise 37.2Gi more"),
        [
            *_cluster(),
            huge,
            wants,
            event(
                huge,
                "Provisioning",
                'External provisioner is provisioning volume for claim "shop/huge"',
                580,
                "Normal",
            ),
            event(huge, "ProvisioningFailed", said, 581),
        ],
    )


def multi_attach_ledger() -> Case:
    data = claim("data", 10, "pvc-a1")
    copy = claim("data-copy", 200, "shadow")
    first = pod("first", [("data", "data")], "w1", 20, ready=True, started=40)
    second = pod("second", [("data", "data-copy")], "w2", 300)
    refusal = (
        f"rpc error: code = FailedPrecondition desc = volume {VOL} is held by node 'w1' "
        f"(SINGLE_NODE_MULTI_WRITER, read-write, since {at(30)}, generation 1); "
        "SINGLE_NODE_MULTI_WRITER allows one node at a time. Waiting for that node to unpublish "
        "is the safe path; if the node is gone for good, see 'csi-hostpath ledger force-detach'"
    )
    return Case(
        "multi-attach-ledger",
        "pod/second",
        "multi-attach-ledger",
        ("the ledger refuses to attach", "node w1 holds it", "pod shop/first"),
        [
            *_cluster(),
            data,
            copy,
            volume("pvc-a1", VOL, "data", 12, 13),
            volume("shadow", VOL, "data-copy", 150, 201),
            attachment("pvc-a1", "w1", 21, True),
            attachment("shadow", "w2", 301, False, refusal),
            first,
            second,
            event(
                second,
                "FailedAttachVolume",
                f'AttachVolume.Attach failed for volume "shadow" : {refusal}',
                590,
            ),
        ],
        {
            VOL: view(
                VOL, [held("w1", 30)], [staged("w1", "pvc-a1", 33, [target("first", "pvc-a1")])]
            )
        },
    )


def rwop_conflict() -> Case:
    only = claim("only", 10, "pvc-o", modes=("ReadWriteOncePod",))
    said = (
        "0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }, 2 node(s) unavailable due to "
        "PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod. "
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No "
        "preemption victims found for incoming pod."
    )
    two = pod("two", [("data", "only")], created=300, scheduled_message=said)
    return Case(
        "rwop-conflict",
        "pod/two",
        "rwop-conflict",
        ("claim only is ReadWriteOncePod", "pod shop/one uses it", "node w1"),
        [
            *_cluster(),
            only,
            volume("pvc-o", VOL, "only", 12, 13, modes=("ReadWriteOncePod",)),
            attachment("pvc-o", "w1", 21, True),
            pod("one", [("data", "only")], "w1", 20, ready=True, started=40),
            two,
            event(two, "FailedScheduling", said, 590),
        ],
        {VOL: view(VOL, [held("w1", 30)], [staged("w1", "pvc-o", 33, [target("one", "pvc-o")])])},
    )


def holder_gone() -> Case:
    rescue = pod("rescue", [("data", "survivor")], "w2", 400)
    return Case(
        "holder-gone",
        "pod/rescue",
        "holder-node-gone",
        ("node w1, which holds volume pvc-s, is NotReady", "silent for", "until w1 lets go"),
        [
            node("w1", "Unknown", 330),
            node("w2"),
            csinode("w1"),
            csinode("w2"),
            csidriver(),
            storage_class("csi-hostpath"),
            claim("survivor", 10, "pvc-s"),
            volume("pvc-s", VOL, "survivor", 12, 13),
            attachment("pvc-s", "w1", 21, True),
            pod("doomed", [("data", "survivor")], "w1", 20, started=40),
            rescue,
            event(
                rescue,
                "FailedAttachVolume",
                'Multi-Attach error for volume "pvc-s" Volume is already used by pod(s) doomed',
                590,
            ),
        ],
        {
            VOL: view(
                VOL,
                [held("w1", 30, age=300.0)],
                [staged("w1", "pvc-s", 33, [target("doomed", "pvc-s")])],
            )
        },
    )


def fenced() -> Case:
    audit = [
        row("publish", "w1", 30, 1),
        row("force-detach", "w1", 450, 1, "w1 powered off (ticket 7)"),
        row("fenced", "w1", 520, 1, "FENCING volume: its hold was revoked"),
        row("publish", "w1", 560, 3),
    ]
    return Case(
        "fenced",
        "pod/doomed",
        "fenced",
        ("node w1 came back after its hold on pvc-s was revoked", "fenced the volume"),
        [
            *_cluster(),
            claim("survivor", 10, "pvc-s"),
            volume("pvc-s", VOL, "survivor", 12, 13),
            attachment("pvc-s", "w1", 21, True),
            pod("doomed", [("data", "survivor")], "w1", 20, ready=True, started=40),
        ],
        {
            VOL: view(
                VOL,
                [held("w1", 560, generation=3)],
                [staged("w1", "pvc-s", 565, [target("doomed", "pvc-s")], generation=3)],
                audit,
                generation=3,
            )
        },
    )


def missing_secret() -> Case:
    waits = pod("waits", [("data", "data")], "w1", 20, secret="late-secret")
    said = 'MountVolume.SetUp failed for volume "secret" : secret "late-secret" not found'
    return Case(
        "missing-secret",
        "pod/waits",
        "pod-waits-for-secret",
        ("storage is done in all five phases", "Secret late-secret", "namespace shop"),
        [
            *_cluster(),
            claim("data", 10, "pvc-d"),
            volume("pvc-d", VOL2, "data", 12, 13),
            attachment("pvc-d", "w1", 21, True),
            waits,
            event(waits, "FailedMount", said, 590),
        ],
        {
            VOL2: view(
                VOL2, [held("w1", 22)], [staged("w1", "pvc-d", 23, [target("waits", "pvc-d")])]
            )
        },
    )


def healthy() -> Case:
    return Case(
        "healthy",
        "pod/web",
        "none",
        ("nothing blocks", "Running and Ready on w1", "claim data is done in all five phases"),
        [
            *_cluster(),
            claim("data", 10, "pvc-w"),
            volume("pvc-w", VOL2, "data", 12, 13),
            attachment("pvc-w", "w1", 21, True),
            pod("web", [("data", "data")], "w1", 20, ready=True, started=25),
        ],
        {VOL2: view(VOL2, [held("w1", 22)], [staged("w1", "pvc-w", 23, [target("web", "pvc-w")])])},
    )


CASES = (
    first_consumer(),
    no_capacity(),
    multi_attach_ledger(),
    rwop_conflict(),
    holder_gone(),
    fenced(),
    missing_secret(),
    healthy(),
)
__all__ = ["CASES", "NOW", "Case"]
