"""What blocks a pod once its storage is done in all five phases: another of its volumes (a
Secret or ConfigMap that does not exist), a container that can't start, a readiness check, or
nothing at all.

Pure: it reads the pod, its events and the claims' phases (why/rules/diagnosis.py).
"""

from __future__ import annotations

from csi_hostpath.why.rules import kube_fields as kf
from csi_hostpath.why.rules.diagnosis import Blocker, ClaimPhases, Observed


def _names(claims: tuple[ClaimPhases, ...]) -> str:
    listed = ", ".join(c.claim for c in claims)
    return f"claim {listed} is" if len(claims) == 1 else f"claims {listed} are"


def _missing(obs: Observed) -> tuple[str, str, str] | None:
    """(kind, name, the pod's volume or container) of a Secret or ConfigMap the pod waits for."""
    for e in kf.newest_first(obs.events_of(obs.pod)):
        message = str(e.get("message", ""))
        found = kf.missing_source(message) if e.get("reason") == "FailedMount" else None
        if found is not None:
            volume = kf.FOR_VOLUME.search(message)
            return (*found, f"volume {volume.group(1)}" if volume else "a volume")
    for container, reason, message in kf.waiting_containers(obs.pod):
        found = kf.missing_source(message) if reason == "CreateContainerConfigError" else None
        if found is not None:
            return (*found, f"container {container}")
    return None


def pod_blocker(obs: Observed, claims: tuple[ClaimPhases, ...]) -> Blocker:
    pod = obs.pod
    if pod is None:  # a claim no pod uses, done as far as it can be
        return Blocker("none", "nothing blocks the claim", "nothing to do")
    ns, name, node = obs.namespace, kf.name(pod), kf.text(pod, "spec", "nodeName")
    done = f"{_names(claims)} done in all five phases" if claims else "it uses no claim"
    missing = _missing(obs)
    if missing is not None and not kf.is_true(pod, "Ready"):
        kind, source, where = missing
        create = (
            f"kubectl -n {ns} create secret generic {source} --from-literal=KEY=VALUE"
            if kind == "Secret"
            else f"kubectl -n {ns} create configmap {source} --from-literal=KEY=VALUE"
        )
        return Blocker(
            f"pod-waits-for-{kind.lower()}",
            f"storage is done in all five phases; the pod waits for {kind} {source} ({where}), "
            f"which does not exist in namespace {ns}",
            f"create it ({create}); the claim needs nothing, and deleting it would not help",
        )
    phase = kf.text(pod, "status", "phase")
    if kf.is_finished(pod):
        return Blocker(
            "pod-finished",
            f"pod {ns}/{name} is {phase or 'being deleted'}: it no longer uses its volumes",
            "nothing to do for the storage; start a new pod if one should run",
        )
    if kf.is_true(pod, "Ready"):
        return Blocker(
            "none",
            f"nothing blocks: pod {ns}/{name} is Running and Ready on {node}, and its {done}",
            "nothing to do",
        )
    waiting = [w for w in kf.waiting_containers(pod) if w[1] != "ContainerCreating"]
    if waiting:
        container, reason, message = waiting[0]
        return Blocker(
            "pod-not-running",
            f"storage is done in all five phases; container {container} waits: {reason}"
            + (f" ({message})" if message else ""),
            f"kubectl -n {ns} describe pod {name} and kubectl -n {ns} logs {name} -c "
            f"{container}: the cause is the container's, not the volume's",
        )
    if phase == "Running":
        return Blocker(
            "pod-not-ready",
            f"storage is done in all five phases; pod {ns}/{name} runs but is not Ready "
            "(its readiness check fails)",
            f"kubectl -n {ns} describe pod {name}: read the readiness probe's failures",
        )
    return Blocker(
        "pod-waiting",
        f"storage is done in all five phases; pod {ns}/{name} is {phase or 'not running'} "
        "for a reason that is not its volumes'",
        f"kubectl -n {ns} describe pod {name}: read its events",
    )
