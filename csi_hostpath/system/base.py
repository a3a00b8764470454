"""The system layer's contract: what the services may ask of the kernel and the tools.

Two implementations follow it: ``linux/`` (the real kernel, built by ``linux_system()``) and
``fake/`` (an in-memory twin for fast unit tests, built by ``fake_system()``). Services receive a
:class:`System` in their constructor and never import either.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from csi_hostpath.system.iolimits import IoTuner
from csi_hostpath.system.pinned import Pinned
from csi_hostpath.system.system_errors import (
    CommandError,
    DeviceNodeError,
    NoSpace,
    NoSpaceLeft,
    NotFound,
    NotPermitted,
    ReadOnly,
    ResourceBusy,
    SystemError_,
    TimedOut,
)

# The failures live in system_errors.py; the contract's users import them from here too.
__all__ = [
    "CommandError",
    "DeviceNodeError",
    "NoSpace",
    "NoSpaceLeft",
    "NotFound",
    "NotPermitted",
    "ReadOnly",
    "ResourceBusy",
    "SystemError_",
    "TimedOut",
]


@dataclass(frozen=True, slots=True)
class LoopDevice:
    """A configured loop device as the kernel reports it."""

    path: str  # /dev/loopN
    # From /sys/block/loopN/loop/backing_file: the path as seen from the mount namespace and root
    # of the process that attached it (after a container restart, "/volumes/<id>.img" or some
    # other container's path), so it names the file only for display; backing_dev and
    # backing_inode (LOOP_GET_STATUS64's lo_device, lo_inode) identify it anywhere.
    backing_file: str
    tag: str  # lo_file_name: "csihp:<node-hash>:<volume-id>" for devices this driver attached
    read_only: bool
    size_bytes: int
    backing_dev: int = 0  # st_dev of the backing file (0: unknown)
    backing_inode: int = 0  # st_ino of the backing file (0: unknown)

    def backed_by(self, path: Path) -> bool:
        """Is this device's backing file the file at path (in this process's view)?"""
        try:
            st = os.stat(path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.backing_dev, self.backing_inode)


@dataclass(frozen=True, slots=True)
class LoopCensus:
    """The loop devices of this kernel, counted in one scan: what NodeGetInfo's volume limit
    is made of (core/volume_limit.py)."""

    devices: int  # loop devices the kernel has now, bound or not (/sys/block/loopN)
    bound: int  # of them, attached to a backing file, by any process on this kernel
    ours: int  # of the bound ones, carrying the tag prefix asked for (this node's volumes)
    ceiling: int  # devices the kernel can have at most, made on demand by LOOP_CTL_GET_FREE


@dataclass(frozen=True, slots=True)
class MountEntry:
    """One line of /proc/self/mountinfo, reduced to what the driver needs."""

    mount_point: str
    source: str  # device path, or the mount source as the kernel shows it
    fs_type: str
    device_number: str  # "major:minor" of the mounted filesystem
    root: str  # root of the mount within its filesystem ("/" unless a bind of a subtree)
    options: tuple[str, ...]  # per-mount options, e.g. ("rw", "relatime")


@dataclass(frozen=True, slots=True)
class Holder:
    """A process that keeps a mount or a device busy."""

    pid: int
    command: str
    how: str  # "cwd", "root", "open file", "mapped file" or where it mounts it in its namespace

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command}, {self.how})"


def held_by(holders: Sequence[Holder], limit: int = 5) -> str:
    """'held by pid 12 (sleep, cwd), ...', or '' when nobody was found."""
    if not holders:
        return ""
    shown = ", ".join(str(h) for h in holders[:limit])
    more = f" and {len(holders) - limit} more" if len(holders) > limit else ""
    return f"held by {shown}{more}"


@dataclass(frozen=True, slots=True)
class FsStats:
    total_bytes: int
    available_bytes: int
    used_bytes: int
    total_inodes: int
    free_inodes: int
    used_inodes: int


class Pool(Protocol):
    """Sparse backing files in one directory."""

    @property
    def root(self) -> Path: ...

    def create(self, path: Path, size_bytes: int) -> None:
        """Create a sparse file of exactly size_bytes. Raises NoSpace if the pool can't hold it.

        Idempotent: an existing file of the same size is left alone.
        """

    def remove(self, path: Path) -> None:
        """Remove the file; a missing file is not an error."""

    def size(self, path: Path) -> int | None:
        """Apparent size in bytes, or None if the file does not exist."""

    def allocated(self, path: Path) -> int:
        """Bytes really allocated on disk (st_blocks * 512); 0 if missing."""

    def grow(self, path: Path, size_bytes: int) -> None:
        """Extend the file to size_bytes (never shrinks)."""

    def copy_sparse(self, source: Path, dest: Path) -> None:
        """Copy without reading or writing holes: reflink if possible, else SEEK_DATA/SEEK_HOLE."""

    def free_bytes(self) -> int:
        """Bytes available to the driver in the pool filesystem (statvfs f_bavail)."""

    def writable(self) -> bool | None:
        """Whether the pool directory takes writes; None when the directory is gone."""


class Loop(Protocol):
    """Loop devices. Devices are found by their tag, because backing paths can be shared by
    several node plugins on one kernel (kind nodes, or the multi-node tests)."""

    def attach(self, backing_file: Path, tag: str, *, read_only: bool = False) -> LoopDevice:
        """Attach backing_file to a free loop device labelled with tag, and return it.

        Idempotent: a device already carrying this tag is returned as it is.
        """

    def find(self, tag: str) -> LoopDevice | None:
        """The configured device carrying this tag, if any."""

    def list(self, tag_prefix: str = "") -> list[LoopDevice]:
        """Every configured loop device whose tag starts with tag_prefix."""

    def census(self, tag_prefix: str) -> LoopCensus:
        """Count the kernel's loop devices: all of them, the bound ones, and the bound ones
        whose tag starts with tag_prefix."""

    def detach(self, device: LoopDevice) -> None:
        """Release the device if it still carries device's tag and backing file (its number may
        serve someone else's attach by now: then nothing is touched). Clears its read-only flag
        first. An unconfigured device is fine."""

    def refresh_capacity(self, device: str) -> None:
        """Make the device see its backing file's new size (LOOP_SET_CAPACITY)."""

    def set_read_only(self, device: str, read_only: bool) -> None:
        """BLKROSET. Does not stop a mounted filesystem from writing; see docs/design.md."""

    def holders(self, device: str) -> tuple[Holder, ...]:
        """Processes that have the device open or use a filesystem mounted from it: why a
        detach stays pending (autoclear)."""

    def watch(self, changed: Callable[[str], None]) -> Callable[[], None]:
        """Call changed(device) from a background thread whenever the kernel reports a change
        of a loop device (attached, detached, resized); returns the function that stops it."""


class Fs(Protocol):
    def probe(self, device: str) -> str | None:
        """The filesystem type on device (blkid), or None if it holds none."""

    def mkfs(self, device: str, fs_type: str) -> None: ...

    def grow(self, device: str, mount_point: str, fs_type: str) -> None:
        """Grow a mounted filesystem to fill its device (resize2fs / xfs_growfs)."""

    def stats(self, path: str) -> FsStats: ...

    def size(self, device: str) -> int | None:
        """The filesystem's own size in bytes, read from its superblock (unmounted device);
        None if the device holds no ext4 or xfs filesystem."""

    def grow_offline(self, device: str, fs_type: str) -> None:
        """Grow an unmounted ext4 to fill its device (e2fsck -f, then resize2fs). Needs no
        CAP_SYS_RESOURCE, unlike the online resize."""

    def error_count(self, device: str) -> int:
        """Errors and failed writes the kernel has recorded for the mounted filesystem on device
        (ext4's errors_count and warning_count); 0 where the filesystem keeps no count."""

    def shutdown(self, mount_point: str) -> None:
        """FS_IOC_SHUTDOWN with NOSYNC: every later write fails with EIO at once."""

    def freeze(self, mount_point: str) -> None: ...

    def thaw(self, mount_point: str) -> None: ...


class Mounts(Protocol):
    """Path-based calls open their path with no symbolic link followed (pinned.py) and act on
    that; the *_on calls act on an object the caller opened and checked itself."""

    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None: ...

    def mount_on(self, device: str, target: Pinned, fs_type: str, options: Sequence[str]) -> None:
        """Mount device's filesystem onto the object target holds, wherever it now is."""

    def bind(self, source: str, target: str, *, read_only: bool) -> None: ...

    def bind_on(self, source: Pinned, target: Pinned, *, read_only: bool) -> None:
        """Bind source's object onto target's; a read-only bind is never writable, even for an
        instant."""

    def bind_device_on(self, device: str, target: Pinned, *, read_only: bool) -> None:
        """Bind the device node (/dev/loopN) onto target's object (a file)."""

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        """Unmount target; a path that is not a mount point (or does not exist, or is reached
        through a symbolic link) is fine."""

    def unmount_on(self, parent: Pinned, name: str, *, lazy: bool = False) -> None:
        """Unmount the mount whose root is parent's entry `name` (a caller identified it with
        find_on, and holds no descriptor of it: that would keep it busy); nothing when no mount's
        root is there, or a link is."""

    def find_on(self, target: Pinned) -> MountEntry | None:
        """The mount whose root is target's object, or None: an answer about the object, not
        about whatever its path leads to now."""

    def find(self, target: str) -> MountEntry | None:
        """The topmost mount at exactly this path, if any."""

    def list(self) -> list[MountEntry]: ...

    def shared_lookups(self) -> AbstractContextManager[None]:
        """A scope (one RPC) in which this thread's lookups may share one read of the mount
        table, dropped by every mount and unmount made through this layer."""

    def holders(self, target: str) -> tuple[Holder, ...]:
        """Processes using the filesystem mounted at target (cwd, root, open or mapped files),
        or the device a block target binds: why an unmount is busy."""


class Devices(Protocol):
    def size(self, device: str) -> int:
        """Size in bytes of a block device (BLKGETSIZE64)."""

    def is_node(self, path: str, device: str) -> bool:
        """Is the file at path (a bind mount's target, say) the block device node of device:
        a block special file with the same device number? False when either is missing."""


def nothing_missing() -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class System:
    pool: Pool
    loop: Loop
    fs: Fs
    mounts: Mounts
    devices: Devices
    io: IoTuner
    # What this machine lacks to serve a node (Probe reports it, empty when nothing): the real
    # layer looks at /dev/loop-control and the tools on PATH; a fake kernel lacks nothing, so a
    # driver on it is ready without root.
    readiness: Callable[[], list[str]] = nothing_missing
