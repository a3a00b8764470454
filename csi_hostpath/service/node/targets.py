"""A CO's staging or target path, opened once for a mount and checked through what was opened.

The path is judged as text first (paths.py: absolute, no '..', not the driver's own
directories). Then its parent is opened with no symbolic link in any component, the last
component is made there if it is missing, and that object is opened the same way
(system/pinned.py). Everything after reads and acts on those descriptors: the kind and the
entries checked, the mount made onto it, the mount found on it, the directory removed from the
parent that was opened. A symlink exchanged into the path at any moment fails the open, or
changes nothing that was already opened.

What is refused, and why:
- a missing parent: Kubernetes always makes it (the kubelet writes vol_data.json beside a
  staging path, and makes a target's parent before NodePublishVolume), so a missing one means
  the path is not the kubelet's; the driver makes only the last component;
- a symbolic link anywhere on the path: a kubelet directory moved to another disk must be a bind
  mount (or the kubelet's --root-dir the real path), not a link;
- a directory that holds anything, or a file that holds bytes: a mount would hide them. A repeat
  of the same call is answered before this check, from the mount already there.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Literal

from csi_hostpath.core.errors import InvalidRequest
from csi_hostpath.core.request_text import shown
from csi_hostpath.service.node._log import log
from csi_hostpath.system.pinned import Closing, Pinned, SymlinkInPath, open_parent

Make = Literal["dir", "file"]


@dataclass
class Opened(Closing):
    """A path's parent and its last component, both pinned."""

    parent: Pinned
    name: str
    obj: Pinned

    @property
    def path(self) -> str:
        return self.obj.path

    def reopen(self) -> None:
        """Open the name again from the pinned parent: after a mount or an unmount, what is
        there now (the new mount's root, or the directory beneath) is another object."""
        fresh = self.parent.open_child(self.name)
        self.obj.close()
        self.obj = fresh

    def close(self) -> None:
        self.obj.close()
        self.parent.close()


def _symlink(what: str, path: str) -> InvalidRequest:
    return InvalidRequest(
        f"{what} {shown(path)} leads through a symbolic link; the driver mounts only onto a real "
        "directory or file reached by real directories, never through a link"
    )


def open_for_mount(path: str, what: str, make: Make, *, not_on: str = "") -> Opened:
    """Open path (already judged) for a mount, making its last component if it is missing.
    InvalidRequest for a missing parent, a link on the way, an object of the wrong kind, or a
    parent on the filesystem whose device number ("major:minor") is not_on."""
    parent_path = os.path.dirname(path)
    try:
        parent, name = open_parent(path)
    except SymlinkInPath as e:
        raise _symlink(what, path) from e
    except FileNotFoundError as e:
        raise InvalidRequest(
            f"{what} {shown(path)}: its parent directory {shown(parent_path)} does not exist. "
            "The CO makes it before the call (the kubelet always does); the driver makes only "
            "the last component"
        ) from e
    except OSError as e:
        raise InvalidRequest(
            f"{what} {shown(path)}: its parent {shown(parent_path)} can't be opened: {e.strerror}"
        ) from e
    st_dev = parent.st.st_dev
    if not_on and f"{os.major(st_dev)}:{os.minor(st_dev)}" == not_on:
        parent.close()
        raise InvalidRequest(
            f"{what} {shown(path)} is inside the volume's own filesystem (its staging mount, "
            "reached by another name): the CO passes a path outside it"
        )
    try:
        if make == "dir":
            parent.make_dir(name)
        else:
            parent.make_file(name)
        obj = parent.open_child(name)
    except SymlinkInPath as e:
        parent.close()
        raise _symlink(what, path) from e
    except OSError as e:
        parent.close()
        raise InvalidRequest(f"{what} {shown(path)} can't be created: {e.strerror}") from e
    opened = Opened(parent, name, obj)
    if make == "dir" and not obj.is_dir():
        opened.close()
        raise InvalidRequest(f"{what} {shown(path)} exists and is not a directory")
    # A block device node is what a target already bound looks like: the caller asks whose
    # mount it is (the repeat of a publish), and refuses one that is no mount.
    if make == "file" and not (obj.is_file() or stat.S_ISBLK(obj.st.st_mode)):
        opened.close()
        kind = "a directory" if obj.is_dir() else "not a regular file"
        raise InvalidRequest(f"{what} {shown(path)} is {kind}; a block volume needs a file")
    return opened


def open_existing(path: str) -> Opened | None:
    """Open path (already checked as text) to find and take down what is mounted there; None
    when it is not there. SymlinkInPath when a link is on the way: the caller decides whether
    that hides the volume's own mount."""
    try:
        parent, name = open_parent(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        obj = parent.open_child(name)
    except FileNotFoundError:
        parent.close()
        return None
    except BaseException:
        parent.close()
        raise
    return Opened(parent, name, obj)


def require_empty(opened: Opened, what: str) -> None:
    """A mount hides what a directory holds, and a bind of a device hides a file's bytes."""
    obj = opened.obj
    if obj.is_dir():
        names = obj.entries(limit=4)
        if names:
            listed = ", ".join(shown(n, 60) for n in names[:3]) + (
                ", ..." if len(names) > 3 else ""
            )
            raise InvalidRequest(
                f"{what} {shown(opened.path)} is not empty ({listed}): a mount there would hide "
                "what it holds. The CO passes a new, empty directory"
            )
    elif obj.refresh().st_size > 0:
        raise InvalidRequest(
            f"{what} {shown(opened.path)} holds {obj.st.st_size} bytes: binding the volume's "
            "device there would hide them. The CO passes a new path or an empty file"
        )


def remove_made(opened: Opened) -> None:
    """Remove the target the driver made, relative to the parent that was opened: an empty
    directory, or an empty placeholder file; never a link, never what holds anything (the kernel
    refuses a directory that holds entries or is a mount point)."""
    try:
        st = opened.parent.child_stat(opened.name)
        if stat.S_ISDIR(st.st_mode):
            opened.parent.remove(opened.name, directory=True)
        elif stat.S_ISREG(st.st_mode) and st.st_size == 0:
            opened.parent.remove(opened.name, directory=False)
    except FileNotFoundError:
        pass
    except OSError as e:  # not empty, still a mount point: not the driver's to remove
        log.warning("left %s in place: %s", shown(opened.path), e.strerror)
