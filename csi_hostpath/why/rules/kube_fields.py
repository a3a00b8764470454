"""Reading Kubernetes objects as the API server sends them (JSON, camelCase): names, times,
conditions, events, the claims a pod names, the messages the components write.

Pure: the objects come in as plain mappings, nothing is fetched here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Obj = Mapping[str, Any]

# The annotation the scheduler sets on a WaitForFirstConsumer claim once it picked a node.
SELECTED_NODE = "volume.kubernetes.io/selected-node"
# The kubelet's (and a container's) words for a Secret or ConfigMap that does not exist.
MISSING_SOURCE = re.compile(r'\b(secret|configmap)s? "([^"]+)" not found', re.IGNORECASE)
FOR_VOLUME = re.compile(r'for volume "([^"]+)"')
UNMOUNTED = re.compile(r"unmounted volumes=\[([^\]]*)\]")


def field(obj: Obj | None, *path: str) -> Any:
    """obj[path[0]][path[1]]...; None where any step is missing."""
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def text(obj: Obj | None, *path: str) -> str:
    value = field(obj, *path)
    return "" if value is None else str(value)


def name(obj: Obj | None) -> str:
    return text(obj, "metadata", "name")


def uid(obj: Obj | None) -> str:
    return text(obj, "metadata", "uid")


def parse_time(value: Any) -> float | None:
    """An RFC 3339 time of the API (`2026-12-06T05:59:00Z`, with a fraction for MicroTime) as
    Unix seconds; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def created(obj: Obj | None) -> float | None:
    return parse_time(field(obj, "metadata", "creationTimestamp"))


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for c in field(obj, "status", "conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    return text(condition(obj, kind), "status") == "True"


def event_time(event: Obj) -> float:
    """When an event last happened: a series' last observation, lastTimestamp, eventTime, or
    when it was created (the components fill different ones)."""
    for value in (
        field(event, "series", "lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        field(event, "metadata", "creationTimestamp"),
    ):
        at = parse_time(value)
        if at is not None:
            return at
    return 0.0


def newest_first(events: Iterable[Obj]) -> list[Obj]:
    return sorted(events, key=event_time, reverse=True)


def newest(events: Iterable[Obj], reason: str, contains: str = "") -> Obj | None:
    """The newest event of that reason whose message holds `contains`."""
    for e in newest_first(events):
        if e.get("reason") == reason and contains in str(e.get("message", "")):
            return e
    return None


def claims_of(pod: Obj) -> list[tuple[str, str]]:
    """(the pod's volume name, the claim's name) of each claim the pod uses, in its order; a
    generic ephemeral volume's claim is named <pod>-<volume>."""
    found = []
    for v in field(pod, "spec", "volumes") or []:
        claim = text(v, "persistentVolumeClaim", "claimName")
        if claim:
            found.append((str(v.get("name", "")), claim))
        elif isinstance(v.get("ephemeral"), Mapping):
            found.append((str(v.get("name", "")), f"{name(pod)}-{v.get('name', '')}"))
    return found


def uses_claim(pod: Obj, claim: str) -> bool:
    return any(c == claim for _, c in claims_of(pod))


def is_finished(pod: Obj) -> bool:
    """A pod that let go of its volumes, or is letting go."""
    return text(pod, "status", "phase") in ("Succeeded", "Failed") or bool(
        field(pod, "metadata", "deletionTimestamp")
    )


def consumer_of(pods: Iterable[Obj], claim: str) -> Obj | None:
    """The pod to explain a claim by: one using it that is not Ready first (it is the one
    waiting), else the oldest one using it."""
    users = [p for p in pods if uses_claim(p, claim) and not is_finished(p)]
    users.sort(key=lambda p: (is_true(p, "Ready"), created(p) or 0.0))
    return users[0] if users else None


def container_started(pod: Obj | None) -> float | None:
    """When the first of the pod's containers started (running now, or before its last exit):
    by then the kubelet had published every volume of the pod."""
    times = []
    for s in field(pod, "status", "containerStatuses") or []:
        for path in (("state", "running", "startedAt"), ("lastState", "terminated", "startedAt")):
            at = parse_time(field(s, *path))
            if at is not None:
                times.append(at)
    return min(times) if times else None


def waiting_containers(pod: Obj | None) -> list[tuple[str, str, str]]:
    """(container, reason, message) of each init or app container that waits."""
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for s in field(pod, "status", key) or []:
            waiting = field(s, "state", "waiting")
            if isinstance(waiting, Mapping):
                out.append(
                    (str(s.get("name", "")), text(waiting, "reason"), text(waiting, "message"))
                )
    return out


def node_ready(node: Obj | None) -> tuple[str, float | None]:
    """The Ready condition of a node: "True", "False", "Unknown" (its kubelet stopped
    reporting), or "" when the node object is not there; and since when."""
    c = condition(node, "Ready")
    if node is None or c is None:
        return "", None
    return text(c, "status"), parse_time(c.get("lastTransitionTime"))


def drivers_on(csinode: Obj | None) -> list[str]:
    return [text(d, "name") for d in field(csinode, "spec", "drivers") or []]


def missing_source(message: str) -> tuple[str, str] | None:
    """("Secret" or "ConfigMap", its name) when the message says one does not exist."""
    m = MISSING_SOURCE.search(message)
    if m is None:
        return None
    return ("Secret" if m.group(1).lower().startswith("secret") else "ConfigMap"), m.group(2)


def unmounted_volumes(events: Sequence[Obj]) -> set[str] | None:
    """The pod volumes the kubelet last said it had not mounted yet ("unmounted volumes=[a
    b]"), or None when no event said."""
    for e in newest_first(events):
        m = UNMOUNTED.search(str(e.get("message", "")))
        if e.get("reason") == "FailedMount" and m is not None:
            return set(m.group(1).split())
    return None


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def clock(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
