"""The CO's staging and target paths, judged by what they resolve to, never by their text.

Comparing strings let a symlink through: a staging path that was a symlink to the state
directory had a volume mounted over state.db, and a dangling symlink at a block target had the
driver create the file it named. The rules:

- The path's *last* component is never a symlink. The CO creates the staging directory and the
  target's parent as real directories, and the driver creates the target itself, so a symlink
  there was put there by someone else; mounting through it would land wherever it points.
- Its ancestors may be symlinks: a kubelet root moved to another disk often is one (kubeadm's
  own workaround for a custom root-dir). So the parent is resolved (realpath) and the resolved
  path is what is judged.
- The resolved path is never the state or pool directory, inside either, or an ancestor of
  either (a mount there would hide the store or the pool's files from the driver itself).
- The last line of defence is at creation: a block target is made with O_NOFOLLOW, so a link
  swapped in after the check fails the call instead of creating the file it names.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.system.base import MountEntry, System


def check_path(path: str, what: str) -> str:
    """CO paths are used as given, but never a relative one or one that climbs with '..'."""
    if "\x00" in path or not path.startswith("/") or ".." in path.split("/"):
        raise InvalidRequest(f"{what} must be an absolute path without '..': {path[:200]!r}")
    return os.path.normpath(path)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def refuse_symlink(path: str, what: str) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return  # absent (the driver creates it) or unreadable (the later step says why)
    if stat.S_ISLNK(st.st_mode):
        try:
            to = f" (to {os.readlink(path)[:200]!r})"
        except OSError:  # gone again since the lstat
            to = ""
        raise InvalidRequest(
            f"{what} {path} is a symbolic link{to}; the driver mounts only onto a real "
            "directory or file, never through a link"
        )


class DriverDirs:
    """The driver's own directories, which no CO path may resolve to, into or above."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs  # "state directory" -> its path, ...

    def judged(self, path: str, what: str) -> str:
        """The CO's path (normalised, as given) once it is judged safe to mount onto."""
        path = check_path(path, what)
        refuse_symlink(path, what)
        parent, name = os.path.split(path)
        resolved = os.path.join(os.path.realpath(parent), name) if name else "/"
        for label, directory in self.dirs.items():
            real = os.path.realpath(directory)
            if _within(resolved, real) or _within(real, resolved):
                where = "at or inside" if _within(resolved, real) else "an ancestor of"
                shown = path if resolved == path else f"{path} (resolved: {resolved})"
                raise InvalidRequest(
                    f"{what} {shown} is {where} the driver's {label} {real}: a mount there "
                    "would hide the driver's own files"
                )
        return path


def mounted_at(system: System, path: str) -> MountEntry | None:
    """The mount at path itself. A symlink has none: the mount table knows only resolved paths,
    so following the link would find (and teardown would unmount) whatever it points to, such
    as another pod's target of the same volume."""
    return None if os.path.islink(path) else system.mounts.find(path)


def create_file_nofollow(path: str) -> None:
    """Create an empty placeholder file at path unless one is there; a symlink at path (even a
    dangling one) fails with ELOOP instead of creating the file it names."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    os.close(fd)
