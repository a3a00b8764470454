"""kill -9 of one component inside a kind node, and how to tell it came back. Everything goes
through `docker exec NODE`: crictl for containers (static pods and the release's), pgrep for the
systemd units, `kill -9 PID` for the kill itself. None of it needs the API server, which may be
the component that is down."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.k8s.experiments.nodes import Nodes
from tests.k8s.faults import hostside
from tests.k8s.faults.matrix import Component, component


class NotRunning(Exception):
    """The component has no running process or container there now."""


@dataclass(frozen=True)
class Target:
    component: str
    node: str

    def __str__(self) -> str:
        return f"{self.component}@{self.node}"


@dataclass(frozen=True)
class Kill:
    target: Target
    at: float  # time.time() of the kill
    pid: int
    # The killed container's id (empty for a systemd unit).
    container: str = ""


@dataclass(frozen=True)
class Aim:
    container: str
    pid: int
    # The process's start time in clock ticks since boot: with the pid, one process for ever.
    start: str
    # Its pid on the host, when the host sees the node's processes (0: kill through the node).
    host_pid: int = 0


def aimed_kill(aim: Aim) -> str:
    """A shell line that kills the aimed process only if its start time is still the aim's, and
    exits non-zero otherwise."""
    return (
        f"s=$(sed 's/.*) //' /proc/{aim.pid}/stat | cut -d' ' -f20) && "
        f'[ "$s" = {aim.start} ] && kill -9 {aim.pid}'
    )


def pick_containers(ps_json: str, namespace: str, pod_prefix: str, name: str) -> list[str]:
    """The running containers of `crictl ps -o json` named `name` in a pod of that namespace whose
    name starts with pod_prefix."""
    found = []
    for c in json.loads(ps_json or "{}").get("containers") or []:
        labels = c.get("labels") or {}
        if (
            c.get("state") == "CONTAINER_RUNNING"
            and labels.get("io.kubernetes.pod.namespace") == namespace
            and str(labels.get("io.kubernetes.pod.name", "")).startswith(pod_prefix)
            and (labels.get("io.kubernetes.container.name") or c["metadata"]["name"]) == name
        ):
            found.append(str(c["id"]))
    return found


def pid_of(inspect_json: str) -> int:
    """The process of `crictl inspect ID`: info.pid (containerd's CRI)."""
    pid = int((json.loads(inspect_json).get("info") or {}).get("pid") or 0)
    if pid <= 0:
        raise NotRunning("crictl inspect names no pid")
    return pid


def parse_pids(pgrep: str) -> list[int]:
    return [int(w) for w in pgrep.split() if w.isdigit()]


class Killer:
    """Finds and kills a component in a node. `pod_prefix(role, node)` names the release's pod of
    a role (controller, node) on that node; static pods are found by their own name."""

    def __init__(
        self,
        nodes: Nodes,
        driver_ns: str,
        pod_prefix: Callable[[str, str], str],
        init_pid: Callable[[str], int] | None = None,
    ) -> None:
        self.nodes = nodes
        self.driver_ns = driver_ns
        self.pod_prefix = pod_prefix
        # A node's init as the host sees it (its container's pid), if the host sees it.
        self.init_pid = init_pid

    def _container(self, comp: Component, node: str) -> str:
        if comp.kind == "static":
            ns, prefix = "kube-system", f"{comp.process}-"
        else:
            ns, prefix = self.driver_ns, self.pod_prefix(comp.pod, node)
        out = self.nodes.exec(node, ["crictl", "ps", "-o", "json", "--state", "running"], 30)
        ids = pick_containers(out, ns, prefix, comp.process)
        if len(ids) != 1:
            raise NotRunning(f"{len(ids)} running containers {comp.process} in {prefix}* on {node}")
        return ids[0]

    def running(self, target: Target) -> tuple[str, int]:
        """(container id, pid) of what runs now; raises NotRunning when nothing does."""
        comp = component(target.component)
        if comp.kind == "unit":
            try:
                pids = parse_pids(self.nodes.exec(target.node, ["pgrep", "-x", comp.process]))
            except Exception as e:  # pgrep exits 1 when nothing matches
                raise NotRunning(f"no {comp.process} process on {target.node}") from e
            if len(pids) != 1:
                raise NotRunning(f"{len(pids)} {comp.process} processes on {target.node}")
            return "", pids[0]
        try:
            cid = self._container(comp, target.node)
            pid = pid_of(self.nodes.exec(target.node, ["crictl", "inspect", cid], 30))
        except NotRunning:
            raise
        except Exception as e:  # containerd itself may be down
            raise NotRunning(f"crictl on {target.node}: {e}") from e
        return cid, pid

    def is_up(self, target: Target) -> bool:
        try:
            self.running(target)
        except NotRunning:
            return False
        comp = component(target.component)
        if comp.kind != "unit":
            return True
        try:
            state = self.nodes.exec(target.node, ["systemctl", "is-active", comp.process])
        except Exception:  # is-active exits 3 for anything but active
            return False
        return state.strip() == "active"

    def aim(self, target: Target) -> Aim:
        """What runs now, with its process's start time (field 22 of /proc/PID/stat), taken
        before the action so that the kill after the trigger is one `docker exec`."""
        cid, pid = self.running(target)
        stat = self.nodes.exec(target.node, ["cat", f"/proc/{pid}/stat"], 30)
        start, on_host = hostside.start_time(stat), 0
        if self.init_pid is not None:
            with contextlib.suppress(Exception):  # the host may not see the node: exec then
                found = hostside.host_pid(self.init_pid(target.node), pid)
                if found and hostside.start_of(found) == start:
                    on_host = found
        return Aim(cid, pid, start, on_host)

    def kill(self, target: Target, aimed: Aim | None = None) -> Kill:
        """kill -9 of `aimed` if that very process still runs (its pid and start time: a pid
        reused meanwhile is never shot), else of what runs now."""
        if (
            aimed is not None
            and aimed.host_pid
            and hostside.kill_on_host(aimed.host_pid, aimed.start)
        ):
            return Kill(target, time.time(), aimed.pid, aimed.container)
        if aimed is not None:
            try:
                self.nodes.exec(target.node, ["sh", "-c", aimed_kill(aimed)], 30)
                return Kill(target, time.time(), aimed.pid, aimed.container)
            except Exception:  # the aimed process is gone: look again
                pass
        cid, pid = self.running(target)
        self.nodes.exec(target.node, ["kill", "-9", str(pid)], 30)
        return Kill(target, time.time(), pid, cid)

    def came_back(self, kill: Kill) -> bool:
        """Something new runs in the killed one's place: another container, or another pid of
        the unit, active."""
        try:
            cid, pid = self.running(kill.target)
        except NotRunning:
            return False
        if kill.container:
            return cid != kill.container
        return pid != kill.pid and self.is_up(kill.target)
