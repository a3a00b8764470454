"""A kind node seen from the host, for a kill that must land within milliseconds: the node's
mounts read from its init's /proc/PID/mountinfo, and a process of the node (named by its pid in
the node) found and killed by its host pid. Every `docker exec` costs a tenth of a second or
more; NodeUnstageVolume, between the pod's target gone and the staging mount gone, takes less."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

PROC = Path("/proc")


def _nspids(status: str) -> list[int]:
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return [int(w) for w in line.split()[1:]]
    return []


def _ppid(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def host_pid(node_init: int, ns_pid: int, proc: Path = PROC) -> int:
    """The host's pid of the process the node knows as `ns_pid` (its own, or a pod's, whose pid
    namespaces nest below the node's), or 0. `node_init` is the node container's init (host pid):
    a process counts only if its parents lead to it, as every node has a pid `ns_pid` too."""
    try:
        depth = len(_nspids((proc / str(node_init) / "status").read_text())) - 1
    except OSError:
        return 0
    if depth < 1:
        return 0
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            pids = _nspids((d / "status").read_text())
            if (
                len(pids) > depth
                and pids[depth] == ns_pid
                and _descends(int(d.name), node_init, proc)
            ):
                return int(d.name)
    return 0


def _descends(pid: int, ancestor: int, proc: Path) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        pid = _ppid((proc / str(pid) / "status").read_text())
    return False


def start_time(stat: str) -> str:
    """Field 22 of a /proc/PID/stat, the start in clock ticks since boot (the same seen from any
    namespace); the fields are counted after the command's closing parenthesis, as the command
    itself may hold spaces."""
    return stat[stat.rindex(")") + 2 :].split()[19]


def start_of(pid: int, proc: Path = PROC) -> str:
    """The start time of the host's process `pid`."""
    return start_time((proc / str(pid) / "stat").read_text())


def kill_on_host(pid: int, start: str, proc: Path = PROC) -> bool:
    """SIGKILL to `pid` if it is still the process that started at `start`."""
    try:
        if start_of(pid, proc) != start:
            return False
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        return False
    return True


def mount_points(node_init: int, proc: Path = PROC) -> list[str]:
    """The node's mount points, from its init's mountinfo (field 5)."""
    text = (proc / str(node_init) / "mountinfo").read_text()
    return [line.split()[4] for line in text.splitlines() if len(line.split()) > 4]
