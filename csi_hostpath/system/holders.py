"""Who keeps a mount or a device busy: processes whose working directory, root, open files or
mapped files are on the mount's filesystem, or that have the device open (what `fuser -m` and
`fuser` report).

Matched by device number, never by path: a pod's process sees its volume at its own path in its
own mount namespace (/data, say), so a path under the target never matches, while the st_dev of
what its cwd or fd points at does. psutil lists the processes and names them (the full name where
/proc/PID/comm is cut at 15 bytes, and it handles processes that exit mid-scan); the links
/proc/PID/{cwd,root,fd/N} are stat'ed through, and /proc/PID/maps gives each mapping's device,
which psutil does not expose. psutil is imported by the scans themselves: an idle node plugin
does not hold its 1.4 MiB (tests/unit/test_role_imports.py).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from csi_hostpath.system.base import Holder

# fd links that name no file on a filesystem ("socket:[123]", "pipe:[4]", "anon_inode:...").
_NOT_A_PATH = ("socket:", "pipe:", "anon_inode:", "/memfd:")


def _stat(link: str) -> os.stat_result | None:
    try:
        return os.stat(link)
    except OSError:
        return None


def _open_file_matches(base: str, wanted: Callable[[os.stat_result], bool]) -> bool:
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(_NOT_A_PATH):
            continue
        found = _stat(f"{base}/fd/{fd}")
        if found is not None and wanted(found):
            return True
    return False


def _mapping_matches(base: str, device: int) -> bool:
    try:
        with open(f"{base}/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                # address perms offset dev inode [path]; dev is "major:minor" in hex
                fields = line.split(None, 5)
                if len(fields) < 5 or fields[4] == "0":
                    continue
                major, _, minor = fields[3].partition(":")
                if os.makedev(int(major, 16), int(minor, 16)) == device:
                    return True
    except (OSError, ValueError):
        return False
    return False


def _how(pid: int, wanted: Callable[[os.stat_result], bool], device: int) -> str:
    base = f"/proc/{pid}"
    for link in ("cwd", "root"):
        found = _stat(f"{base}/{link}")
        if found is not None and wanted(found):
            return link
    if _open_file_matches(base, wanted):
        return "open file"
    if _mapping_matches(base, device):
        return "mapped file"
    return ""


def _name(pid: int) -> str:
    import psutil

    try:
        return psutil.Process(pid).name() or "?"
    except psutil.Error:  # exited meanwhile, or not ours to read
        return "?"


def _scan(wanted: Callable[[os.stat_result], bool], device: int) -> list[Holder]:
    # Only the holders are named: psutil's name() costs a few reads per process, and a node can
    # run thousands of them (docs/benchmarks.md, "Who holds a busy mount").
    import psutil

    me = os.getpid()
    found: list[Holder] = []
    for pid in psutil.pids():
        if pid == me:
            continue
        how = _how(pid, wanted, device)
        if how:
            found.append(Holder(pid, _name(pid), how))
    return found


def _mount_namespace(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def _mounted_elsewhere(device: int) -> list[Holder]:
    """One process of each other mount namespace that mounts a filesystem from the device: a
    copy of a mount made before it was unmounted here (unshare, a container's start) keeps the
    device's filesystem in use though no mount here shows it."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    import psutil

    seen = {_mount_namespace("self")}
    found: list[Holder] = []
    for pid in psutil.pids():
        namespace = _mount_namespace(pid)
        if namespace in seen:
            continue
        seen.add(namespace)
        try:
            with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as info:
                points = [f[4] for f in (line.split(" ") for line in info) if f[2] == wanted]
        except (OSError, IndexError):
            continue
        if points:
            found.append(Holder(pid, _name(pid), f"mounts it at {points[0]} in its namespace"))
    return found


def holders_of_path(path: str) -> list[Holder]:
    """Processes using the filesystem mounted at path (this process excluded); for a block
    volume's target (a bind of a device node), the processes that have the device open."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    if stat.S_ISBLK(st.st_mode):
        return holders_of_device(path)
    return _scan(lambda other: other.st_dev == st.st_dev, st.st_dev)


def holders_of_device(device: str) -> list[Holder]:
    """Processes that have the block device open, or use a filesystem mounted from it, or mount
    one from it in a mount namespace of their own."""
    try:
        rdev = os.stat(device).st_rdev
    except OSError:
        return []

    def wanted(other: os.stat_result) -> bool:
        return other.st_dev == rdev or (stat.S_ISBLK(other.st_mode) and other.st_rdev == rdev)

    return _scan(wanted, rdev) + _mounted_elsewhere(rdev)
