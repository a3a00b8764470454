"""The CO's staging and target paths, judged as text before they are opened (targets.py).

Comparing strings alone once let a symlink through: a staging path that was a symlink to the
state directory had a volume mounted over state.db. Text is judged here only because the open that
follows (targets.py, system/pinned.py) refuses a symbolic link in any component: a path that
passes both names exactly the object it reaches, so its text can be compared.

- The path is absolute, without '..', and is normalised.
- It is never the state or pool directory, inside either, or an ancestor of either (a mount there
  would hide the store or the pool's files from the driver itself); the driver's directories are
  compared by their real paths.
- A target is never the staging path, inside it, or above it (refuse_overlap).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from csi_hostpath.core.errors import InvalidRequest


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
        try:
            resolved = os.path.join(os.path.realpath(parent), name) if name else "/"
        except OSError as e:  # a link on the way was replaced while it was read
            raise InvalidRequest(
                f"{what} {path[:300]!r} changed while it was read ({e.strerror}); a path with a "
                "symbolic link on the way is refused in any case"
            ) from e
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


def refuse_overlap(target_path: str, staging_path: str) -> None:
    """A target at, inside or above the staging path: a bind there would make a directory in the
    user's filesystem, or stack on the staging mount, and its unpublish would take the staging
    mount down. Both paths are normalised and reach their objects through no link (targets.py),
    so comparing their text is comparing where they lead."""
    if target_path == staging_path:
        where = "the same path as"
    elif _within(target_path, staging_path):
        where = "inside"
    elif _within(staging_path, target_path):
        where = "an ancestor of"
    else:
        return
    raise InvalidRequest(
        f"target_path {target_path[:300]!r} is {where} the staging_target_path "
        f"{staging_path[:300]!r}: the CO gives each its own directory"
    )
