"""Mounts on a real Linux kernel: mount(2)/umount2(2), with mount(8) behind them; lookups are
mountinfo.py's."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from csi_hostpath.system.base import CommandError, Holder, MountEntry
from csi_hostpath.system.holders import holders_of_path
from csi_hostpath.system.linux import fd_mounts
from csi_hostpath.system.linux._log import log
from csi_hostpath.system.linux.mountinfo import (
    SharedLookups,
    StatmountProbe,
    find_mount,
    read_mountinfo,
    unescape_mountinfo,
)
from csi_hostpath.system.pinned import Pinned, SymlinkInPath
from csi_hostpath.system.runner import run
from csi_hostpath.system.system_errors import command_error, syscall_error

# --- mount(2) and umount2(2) without spawning mount(8) -------------------------------------------
#
# mount(8) costs a fork, an exec and libmount's own parse of mountinfo: 1-2 ms a call, on every
# stage, publish, unpublish and unstage. The calls the driver makes go straight to the kernel, and
# always onto a descriptor of the target (system/pinned.py), never a path resolved again:
#   mount -t xfs -o OPTS DEV DIR   →  mount(realpath(DEV), /proc/self/fd/N, "xfs", <the VFS
#                                     flags of OPTS>, <its other options in order, or NULL>)
#   mount --bind [-o ro] SRC DIR   →  open_tree(SRC) [+ mount_setattr(RDONLY)] + move_mount(DIR)
#                                     (fd_mounts.py)
#   umount [-l] DIR                →  umount2(/proc/self/fd/N, 0 or MNT_DETACH), N the mount's
#                                     root, identified first by its mount ID
# A mount with a filesystem option not in _FS_DATA_OPTIONS, a userspace option, or a source that
# is not a block device goes to the tool (with --no-canonicalize and the descriptor's magic link),
# and so does every mount the kernel refuses: mount(8) may still succeed (it retries a
# write-protected device read-only), and when it fails too, its CommandError carries mount(8)'s
# message and the type of the kernel's errno. An unmount the kernel refuses is not retried with
# umount(8), which would only fail the same way; a mount libmount tracks in utab is left to it.

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_SYNCHRONOUS = 0x10
MS_DIRSYNC = 0x80
MS_NOSYMFOLLOW = 0x100
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
MS_LAZYTIME = 0x2000000
MNT_DETACH = 0x2
UMOUNT_NOFOLLOW = 0x8

# mount(8)'s VFS options (libmount's optmap): name → (flag, set it or clear it).
_VFS_OPTIONS: dict[str, tuple[int, bool]] = {
    "defaults": (0, True),
    "ro": (MS_RDONLY, True),
    "rw": (MS_RDONLY, False),
    "nosuid": (MS_NOSUID, True),
    "suid": (MS_NOSUID, False),
    "nodev": (MS_NODEV, True),
    "dev": (MS_NODEV, False),
    "noexec": (MS_NOEXEC, True),
    "exec": (MS_NOEXEC, False),
    "sync": (MS_SYNCHRONOUS, True),
    "async": (MS_SYNCHRONOUS, False),
    "dirsync": (MS_DIRSYNC, True),
    "noatime": (MS_NOATIME, True),
    "atime": (MS_NOATIME, False),
    "nodiratime": (MS_NODIRATIME, True),
    "diratime": (MS_NODIRATIME, False),
    "relatime": (MS_RELATIME, True),
    "norelatime": (MS_RELATIME, False),
    "strictatime": (MS_STRICTATIME, True),
    "nostrictatime": (MS_STRICTATIME, False),
    "lazytime": (MS_LAZYTIME, True),
    "nolazytime": (MS_LAZYTIME, False),
    "nosymfollow": (MS_NOSYMFOLLOW, True),
    "symfollow": (MS_NOSYMFOLLOW, False),
}
# Filesystem options mount(8) hands to the kernel as they are (the data argument, in order),
# with no meaning to libmount itself; others (x-*, _netdev, loop, offset=, ...) go to the tool.
_FS_DATA_OPTIONS: dict[str, frozenset[str]] = {
    "ext4": frozenset({"discard", "nodiscard"}),
    "xfs": frozenset({"nouuid", "discard", "nodiscard"}),
}
_FAST_FS_TYPES = tuple(_FS_DATA_OPTIONS)
UTAB = "/run/mount/utab"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.mount.restype = ctypes.c_int
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.umount2.restype = ctypes.c_int


def _check(result: int, what: str, path: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}", path)


def sys_mount(
    source: str | None, target: str, fs_type: str | None, flags: int, data: str = ""
) -> None:
    """mount(2); data is the filesystem's option string (NULL when empty). OSError if the kernel
    refuses."""
    # ctypes drops the GIL for the call, so a slow mount does not stall the other RPCs.
    _check(
        _libc.mount(
            None if source is None else os.fsencode(source),
            os.fsencode(target),
            None if fs_type is None else fs_type.encode(),
            flags,
            ctypes.c_char_p(data.encode()) if data else None,
        ),
        "mount(2)",
        target,
    )


def sys_umount(target: str, flags: int) -> None:
    """umount2(2); OSError if the kernel refuses."""
    _check(_libc.umount2(os.fsencode(target), flags), "umount2(2)", target)


def mount_arguments(fs_type: str, options: Sequence[str]) -> tuple[int, str] | None:
    """The (flags, data) mount(8) passes to mount(2) for `-t fs_type -o options`, or None when
    an option needs mount(8) itself (userspace options, or ones this table does not know)."""
    joined = ",".join(options)
    flags = 0
    data: list[str] = []
    for option in joined.split(",") if joined else []:
        known = _VFS_OPTIONS.get(option)
        if known is not None:
            bit, on = known
            flags = flags | bit if on else flags & ~bit
        elif option in _FS_DATA_OPTIONS.get(fs_type, ()):
            data.append(option)
        else:
            return None
    return flags, ",".join(data)


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _in_utab(path: str) -> bool:
    """Whether libmount keeps userspace state for the mount at path (then umount(8) must clean it
    up, so the mount is left to the tool)."""
    try:
        with open(UTAB, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return False
    wanted = "TARGET=" + path
    return any(unescape_mountinfo(field) == wanted for line in lines for field in line.split(" "))


def _fast_mount(device: str, target: Pinned, fs_type: str, options: Sequence[str]) -> bool:
    """mount(2) as mount(8) would call it, onto the pinned target; False when the call is the
    tool's to make. OSError when the kernel refuses."""
    arguments = mount_arguments(fs_type, options)
    if arguments is None or fs_type not in _FAST_FS_TYPES or not _is_block_device(device):
        return False
    flags, data = arguments
    sys_mount(os.path.realpath(device), target.proc, fs_type, flags, data)
    return True


def _fast_or_tool(fast: Callable[[], bool], argv: list[str], lookups: SharedLookups) -> None:
    """The fast call, else the tool; a tool that fails after the kernel refused the fast call
    raises the type of the kernel's errno, with the tool's message."""
    try:
        refused: int | None = None
        try:
            if fast():
                return
        except OSError as exc:
            log.debug("%s; leaving it to %s", exc, argv[0])
            refused = exc.errno
        run(argv, errno=refused)
    finally:
        lookups.changed()  # every caller changes the mount table (or tried to)


def _unmount(parent: Pinned, name: str, lazy: bool, lookups: SharedLookups) -> None:
    try:
        _unmount_now(parent, name, lazy)
    finally:
        lookups.changed()


def _unmount_now(parent: Pinned, name: str, lazy: bool) -> None:
    """Unmount the mount whose root is parent's entry `name`, identified first by its mount ID.

    A descriptor of the mount holds it, so umount2(2) through one is busy unless lazy: a lazy
    detach goes through the descriptor itself; any other unmount goes through the pinned parent
    (/proc/self/fd/P/NAME, the last component never followed), after the mount there is checked
    to be still the one identified, so no symbolic link swapped in can redirect it."""
    try:
        child = parent.open_child(name)
    except (FileNotFoundError, SymlinkInPath):
        return
    with child:
        identified = fd_mounts.mount_of(child)
        if identified is None:
            return  # no mount's root: nothing to unmount here
        if lazy:
            _umount(child.proc, MNT_DETACH, child.path)
            return
    via_parent = f"{parent.proc}/{name}"
    if fd_mounts.mount_at(via_parent) != identified:
        raise syscall_error(
            "umount2", os.path.join(parent.path, name), OSError(errno.EAGAIN, "changed meanwhile")
        )
    _umount(via_parent, UMOUNT_NOFOLLOW, os.path.join(parent.path, name))


def _umount(path: str, flags: int, shown: str) -> None:
    try:
        sys_umount(path, flags)
    except OSError as exc:
        raise syscall_error("umount2", shown, exc) from exc


def _opened(path: str, call: str) -> Pinned:
    """Pinned.open, its refusal typed as the mount's own would be (a missing path NotFound)."""
    try:
        return Pinned.open(path)
    except OSError as exc:
        raise syscall_error(call, path, exc) from exc


class LinuxMounts:
    def __init__(self) -> None:
        # Learnt at the first lookup the kernel can't answer by statmount(2); mountinfo after.
        self.statmount = StatmountProbe()
        # Where that is mountinfo, one RPC's lookups share a parse (shared_lookups()).
        self.lookups = SharedLookups()

    # Every path-based call opens its path with no symbolic link followed and acts on that.
    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None:
        with _opened(target, "mount") as pinned:
            self.mount_on(device, pinned, fs_type, options)

    def mount_on(self, device: str, target: Pinned, fs_type: str, options: Sequence[str]) -> None:
        # The tool gets the same object: --no-canonicalize keeps mount(8) from resolving the
        # magic link to a path of its own; the kernel follows it to the descriptor's object.
        argv = ["mount", "--no-canonicalize", "-t", fs_type]
        if options:
            argv += ["-o", ",".join(options)]
        _fast_or_tool(
            functools.partial(_fast_mount, device, target, fs_type, options),
            [*argv, device, f"/proc/{os.getpid()}/fd/{target.fd}"],
            self.lookups,
        )

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        with (
            _opened(source, "mount --bind") as pinned_source,
            _opened(target, "mount --bind") as pinned_target,
        ):
            self.bind_on(pinned_source, pinned_target, read_only=read_only)

    def bind_on(self, source: Pinned, target: Pinned, *, read_only: bool) -> None:
        try:
            fd_mounts.bind_onto(source, target, read_only=read_only)
        except OSError as exc:
            raise syscall_error("mount --bind", target.path, exc) from exc
        finally:
            self.lookups.changed()

    def bind_device_on(self, device: str, target: Pinned, *, read_only: bool) -> None:
        with _opened(device, "mount --bind") as node:
            self.bind_on(node, target, read_only=read_only)

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        path = os.path.normpath(target)
        try:
            parent = Pinned.open(os.path.dirname(path))
        except (FileNotFoundError, NotADirectoryError, SymlinkInPath):
            return  # nothing is mounted at a path that is not there, or through a link
        with parent:
            if _in_utab(path) and self.find(path) is not None:
                self._unmount_tool(path, lazy)
            else:
                self.unmount_on(parent, os.path.basename(path), lazy=lazy)

    def _unmount_tool(self, path: str, lazy: bool) -> None:
        """libmount keeps userspace state for this mount (a userspace option): only umount(8)
        clears it, and it takes a path. The driver's volumes never carry such options."""
        try:
            run(["umount", "-l", path] if lazy else ["umount", path])
        except CommandError as exc:
            # umount(8)'s exit status says only that it failed; the kernel says why.
            try:
                sys_umount(path, MNT_DETACH if lazy else 0)
            except OSError as again:
                raise command_error(
                    exc.argv, exc.returncode, exc.stdout, exc.stderr, errno=again.errno
                ) from exc
            log.debug("umount(8) failed (%s), umount2(2) did not; %s is unmounted", exc, path)
        finally:
            self.lookups.changed()

    def unmount_on(self, parent: Pinned, name: str, *, lazy: bool = False) -> None:
        try:
            _unmount(parent, name, lazy, self.lookups)
        except CommandError:
            try:
                gone = fd_mounts.mount_at(f"{parent.proc}/{name}") is None
            except OSError:
                gone = True
            if gone:  # someone else unmounted it meanwhile
                return
            raise

    def find(self, target: str) -> MountEntry | None:
        try:
            path = os.path.realpath(target)
        except OSError:  # a link on the way replaced while it was read: no mount is *at* it
            return None
        return find_mount(path, self.statmount, self.lookups)

    def find_on(self, target: Pinned) -> MountEntry | None:
        try:
            return fd_mounts.find_on(target)
        except OSError:  # no statx mount ID (Linux < 5.8): the object's path, looked up now
            path = target.where()
            entry = self.find(path)
            return entry if entry is not None and entry.mount_point == path else None

    def shared_lookups(self) -> AbstractContextManager[None]:
        return self.lookups.scope()

    def list(self) -> list[MountEntry]:
        return [record.entry for record in read_mountinfo()]

    def holders(self, target: str) -> tuple[Holder, ...]:
        path = os.path.realpath(target)
        if self.find(path) is None:
            return ()  # else everyone on the filesystem beneath would be named
        return tuple(holders_of_path(path))
