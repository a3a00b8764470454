"""Who keeps a mount busy: processes whose working directory, root, open files or mapped files
lie under it (what `fuser -vm` reports), read from /proc. The driver's busy error says that
something holds the path; the command adds who, so the person knows what to stop."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    how: str  # "cwd", "root", "open file" or "mapped file"

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command}, {self.how})"


def _under(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip("/") + "/")


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _command(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _how(pid: str, root: str) -> str:
    base = f"/proc/{pid}"
    if _under(_link(f"{base}/cwd"), root):
        return "cwd"
    if root != "/" and _under(_link(f"{base}/root"), root):
        return "root"
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        fds = []
    if any(_under(_link(f"{base}/fd/{fd}"), root) for fd in fds):
        return "open file"
    try:
        with open(f"{base}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and _under(parts[5].strip(), root):
                    return "mapped file"
    except OSError:
        pass
    return ""


def holders(path: str) -> list[Holder]:
    """Processes using anything under path, this process excluded."""
    root = os.path.realpath(path)
    found = []
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        how = _how(pid, root)
        if how:
            found.append(Holder(int(pid), _command(pid), how))
    return found


def describe(path: str, limit: int = 5) -> str:
    found = holders(path)
    if not found:
        return ""
    shown = ", ".join(str(h) for h in found[:limit])
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return f"held by {shown}{more}"
