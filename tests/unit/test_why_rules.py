"""`kubectl csi-hostpath why`'s rules on the eight cases: phases, blocker, next step.

`kubectl csi-hostpath why`'s rules (why/rules/), on the object shapes of the eight cases
(tests/unit/why_cases.py): for each, the five phases and the one blocking reason; the bet and
its owner where the next step is a force-detach; and what the answer says when the driver's
view can't be read."""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable

import pytest

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.blocker import diagnose
from csi_hostpath.why.rules.diagnosis import DONE, FAILED, SCHEMA, WAITING, Observed, as_json
from tests.unit.why_cases import CASES, NOW, Case
from tests.unit.why_shapes import LEDGER, NS, Obj, event, node, pod


def observed(case: Case, ledger: dict[str, Obj] | None = None) -> Observed:
    """What the client would gather: the cases hold only what matters, so all of it."""
    objs = case.objects
    of = defaultdict(list)
    for o in objs:
        of[o["kind"]].append(o)
    kind, name = case.ask.split("/")
    pod = (
        next(p for p in of["Pod"] if kf.name(p) == name)
        if kind == "pod"
        else kf.consumer_of(of["Pod"], name)
    )
    events: dict[str, list[Obj]] = defaultdict(list)
    for e in of["Event"]:
        events[e["involvedObject"]["uid"]].append(e)
    return Observed(
        namespace=NS,
        pod=pod,
        claims={kf.name(c): c for c in of["PersistentVolumeClaim"]},
        storage_classes={kf.name(c): c for c in of["StorageClass"]},
        volumes={kf.name(v): v for v in of["PersistentVolume"]},
        attachments=of["VolumeAttachment"],
        nodes={kf.name(n): n for n in of["Node"]},
        csinodes={kf.name(n): n for n in of["CSINode"]},
        csidrivers={kf.name(d): d for d in of["CSIDriver"]},
        events=events,
        pods=[p for p in of["Pod"] if pod is None or kf.uid(p) != kf.uid(pod)],
        ledger=case.ledger if ledger is None else ledger,
        now=NOW,
        claim_asked=name if kind == "pvc" else "",
        driver_namespace=LEDGER["namespace"],
        driver_pod=LEDGER["controllerPod"],
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_gives_its_one_reason(case: Case) -> None:
    d = diagnose(observed(case))
    assert d.blocker.code == case.code, d.blocker
    for words in case.words:
        assert words in d.blocker.reason, (words, d.blocker.reason)
    assert d.blocker.next_step
    assert "\n" not in d.blocker.reason


def _states(case_name: str) -> list[str]:
    case = next(c for c in CASES if c.name == case_name)
    [claim] = diagnose(observed(case)).claims
    return [p.state for p in claim.phases]


@pytest.mark.parametrize(
    ("name", "states"),
    [
        ("first-consumer", [WAITING, WAITING, WAITING, WAITING, WAITING]),
        ("no-capacity", [FAILED, WAITING, WAITING, WAITING, WAITING]),
        ("multi-attach-ledger", [DONE, DONE, FAILED, WAITING, WAITING]),
        ("rwop-conflict", [DONE, DONE, WAITING, WAITING, WAITING]),
        ("holder-gone", [DONE, DONE, WAITING, WAITING, WAITING]),
        ("fenced", [DONE, DONE, DONE, DONE, DONE]),
        ("missing-secret", [DONE, DONE, DONE, DONE, DONE]),
        ("healthy", [DONE, DONE, DONE, DONE, DONE]),
    ],
)
def test_the_five_phases_of_each_case(name: str, states: list[str]) -> None:
    assert _states(name) == states


def test_the_time_spent_in_each_phase_comes_from_the_objects() -> None:
    case = next(c for c in CASES if c.name == "healthy")
    [claim] = diagnose(observed(case)).claims
    seconds = {p.phase: p.seconds for p in claim.phases}
    # claim at T0+10, volume at +12 and Bound at +13, VolumeAttachment at +21, held since +22,
    # staged at +23, the container started at +25.
    assert seconds == {"provision": 2.0, "bind": 1.0, "attach": 1.0, "stage": 1.0, "publish": 2.0}
    waiting = next(c for c in CASES if c.name == "first-consumer")
    [claim] = diagnose(observed(waiting)).claims
    assert claim.phases[0].seconds == NOW - (NOW - 500)  # since the claim was made
    assert claim.phases[2].seconds is None  # no pod: nothing started it
    # The attach ended at the ledger's first publish to the node after the VolumeAttachment
    # (+21 to +30), not at a later re-grant (+560); a static volume's bind waits for its claim.
    fenced = next(c for c in CASES if c.name == "fenced")
    assert diagnose(observed(fenced)).claims[0].phases[2].seconds == 9.0
    static = next(c for c in CASES if c.name == "multi-attach-ledger")
    assert diagnose(observed(static)).claims[0].phases[1].seconds == 1.0


def test_a_node_gone_says_waiting_is_safe_then_the_bet_and_who_owns_it() -> None:
    case = next(c for c in CASES if c.name == "holder-gone")
    b = diagnose(observed(case)).blocker
    assert b.next_step.startswith("wait: ")
    assert "waiting is the safe default" in b.next_step
    assert "kubectl taint node w1 node.kubernetes.io/out-of-service" in b.next_step
    assert (
        "kubectl -n csi-hostpath exec csi-hostpath-controller-0 -c csi-hostpath -- csi-hostpath "
        "ledger force-detach vol-" in b.next_step
    )
    assert "--node w1 --reason" in b.next_step
    assert "no longer writes" in b.risk and "corrupt" in b.risk
    assert "cluster's operator" in b.owner and "not the pod's owner" in b.owner


def test_only_the_risky_step_carries_a_bet() -> None:
    for case in CASES:
        b = diagnose(observed(case)).blocker
        assert bool(b.risk) == bool(b.owner) == (case.code == "holder-node-gone"), case.name


def test_without_the_drivers_view_the_pods_own_state_still_answers() -> None:
    unread = {"error": "403 Forbidden"}
    secret = next(c for c in CASES if c.name == "missing-secret")
    handle = next(iter(secret.ledger))
    d = diagnose(observed(secret, {handle: unread}))
    # The kubelet's FailedMount names only the Secret's volume: the claim's is not listed as
    # unmounted, but nothing else says it was staged: the stage waits, and says why.
    assert d.blocker.code in ("stage-waiting", "pod-waits-for-secret")
    assert d.driver[handle] == {
        "volume_handle": handle,
        "available": False,
        "error": "403 Forbidden",
    }
    healthy = next(c for c in CASES if c.name == "healthy")
    d = diagnose(observed(healthy, {next(iter(healthy.ledger)): unread}))
    assert d.blocker.code == "none"  # the container started: every volume was published
    assert [p.state for p in d.claims[0].phases] == [DONE] * 5


def test_the_json_document_is_versioned_and_complete() -> None:
    case = next(c for c in CASES if c.name == "holder-gone")
    doc = as_json(diagnose(observed(case)), NOW)
    assert doc["schema"] == SCHEMA == "csi-hostpath.why/v1"
    assert doc["target"] == {"kind": "pod", "namespace": NS, "name": "rescue", "node": "w2"}
    assert set(doc["blocking"]) == {
        "code", "phase", "claim", "reason", "next_step", "risk", "owner"
    }  # fmt: skip
    [claim] = doc["claims"]
    assert [p["phase"] for p in claim["phases"]] == [
        "provision", "bind", "attach", "stage", "publish"
    ]  # fmt: skip
    assert set(claim["phases"][0]) == {"phase", "state", "seconds", "detail", "why"}
    [driver] = doc["driver"]
    assert driver["available"] is True and driver["holders"][0]["node"] == "w1"


def test_a_claim_no_pod_uses_is_explained_by_itself() -> None:
    case = next(c for c in CASES if c.name == "healthy")
    lonely = Case(
        "lonely",
        "pvc/data",
        "no-consumer",
        (),
        [o for o in case.objects if o["kind"] != "Pod"],
        case.ledger,
    )
    d = diagnose(observed(lonely))
    assert d.kind == "pvc" and d.blocker.code == "no-consumer"
    assert "no pod uses it" in d.blocker.reason


def _variant(name: str, change: Callable[[list[Obj], dict[str, Obj]], None]) -> Observed:
    base = next(c for c in CASES if c.name == name)
    objects, ledger = copy.deepcopy(base.objects), copy.deepcopy(base.ledger)
    change(objects, ledger)
    return observed(Case(base.name, base.ask, base.code, (), objects, ledger))


def _of(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and kf.name(o) == name)


def test_a_live_holder_is_kubernetes_own_multi_attach_not_a_bet() -> None:
    def alive(objects: list[Obj], ledger: dict[str, Obj]) -> None:
        objects[:] = [o for o in objects if not (o["kind"] == "Node" and kf.name(o) == "w1")]
        objects.append(node("w1"))
        for h in next(iter(ledger.values()))["holders"]:
            h.update(heartbeat_age_seconds=1.0, silent=False)

    b = diagnose(_variant("holder-gone", alive)).blocker
    assert b.code == "multi-attach" and not b.risk
    assert "attached to node w1 for pod shop/doomed" in b.reason


def test_a_node_without_the_plugin_registered() -> None:
    def unregistered(objects: list[Obj], ledger: dict[str, Obj]) -> None:
        _of(objects, "CSINode", "w1")["spec"]["drivers"] = []
        objects[:] = [o for o in objects if o["kind"] != "VolumeAttachment"]
        ledger.clear()

    b = diagnose(_variant("missing-secret", unregistered)).blocker
    assert b.code == "driver-not-on-node" and "node w1 has no loop.hostpath.csi.dev" in b.reason


def test_a_failed_stage_quotes_the_kubelet() -> None:
    said = (
        'MountVolume.MountDevice failed for volume "pvc-w" : rpc error: code = Internal desc = '
        "mkfs failed"
    )

    def unstaged(objects: list[Obj], ledger: dict[str, Obj]) -> None:
        web = _of(objects, "Pod", "web")
        web["status"] = pod("web", [("data", "data")], "w1", 20)["status"]
        objects.append(event(web, "FailedMount", said, 590))
        next(iter(ledger.values()))["stagings"] = []

    b = diagnose(_variant("healthy", unstaged)).blocker
    assert b.code == "stage-failed" and b.reason.endswith("failed: mkfs failed")


def test_a_container_that_can_not_start_is_the_containers_reason() -> None:
    def no_image(objects: list[Obj], ledger: dict[str, Obj]) -> None:
        web = _of(objects, "Pod", "web")
        web["status"] = pod(
            "web", [("data", "data")], "w1", 20, waiting=("ImagePullBackOff", "Back-off pulling")
        )["status"]

    b = diagnose(_variant("healthy", no_image)).blocker
    assert b.code == "pod-not-running"
    assert "container app waits: ImagePullBackOff (Back-off pulling)" in b.reason
