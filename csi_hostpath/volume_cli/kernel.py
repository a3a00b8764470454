"""What the kernel says is at a path: the mount on it, and which volume's loop device that is.
Read-only: this command never mounts or unmounts anything itself (the driver does)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class MountInfo:
    root: str  # the mounted subtree: "/" for a filesystem, "/loopN" for a bound device node
    source: str  # "/dev/loopN" for a filesystem on a loop device, /dev's for a device bind


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape")


def mount_at(path: str) -> MountInfo | None:
    """The topmost mount on path in /proc/self/mountinfo, or None."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if _unescape(fields[4]) == path:
                dash = fields.index("-")
                found = MountInfo(root=_unescape(fields[3]), source=_unescape(fields[dash + 2]))
    return found


def mount_source(path: str) -> str | None:
    m = mount_at(path)
    return None if m is None else m.source


def loop_volume(path: str) -> str:
    """The volume ID whose backing file (POOL/volumes/<id>.img) backs the loop device mounted
    at path, directly or as a bound device node; "" when it is anything else."""
    m = mount_at(path)
    if m is None:
        return ""
    if m.source.startswith("/dev/loop"):
        device = os.path.basename(m.source)
    elif m.root.startswith("/loop"):
        device = m.root.lstrip("/")
    else:
        return ""
    try:
        with open(f"/sys/block/{device}/loop/backing_file") as f:
            backing = f.read().strip()
    except OSError:
        return ""
    name = os.path.basename(backing)
    return name.removesuffix(".img") if name.endswith(".img") else ""


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def mounts_below(root: str) -> list[tuple[str, str]]:
    """(mount point, source) of every mount at or below root, in mountinfo's order."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            if _below(point, root):
                found.append((point, _unescape(fields[fields.index("-") + 2])))
    return found


def loops_backed_below(root: str) -> list[tuple[str, str]]:
    """(/dev/loopN, backing file) of every loop device whose backing file is below root, as the
    kernel names the file (" (deleted)" when it was removed while attached)."""
    found = []
    for device in sorted(os.listdir("/sys/block")):
        try:
            with open(f"/sys/block/{device}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if _below(backing.removesuffix(" (deleted)"), root):
            found.append((f"/dev/{device}", backing))
    return found
