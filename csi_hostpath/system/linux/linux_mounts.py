"""Mounts on a real Linux kernel: mount(2)/umount2(2), with mount(8) behind them; lookups are
mountinfo.py's."""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from csi_hostpath.system.base import CommandError, Holder, MountEntry
from csi_hostpath.system.holders import holders_of_path
from csi_hostpath.system.linux._log import log
from csi_hostpath.system.linux.mountinfo import (
    SharedLookups,
    StatmountProbe,
    find_mount,
    read_mountinfo,
    unescape_mountinfo,
)
from csi_hostpath.system.runner import run
from csi_hostpath.system.system_errors import command_error, syscall_error

# --- mount(2) and umount2(2) without spawning mount(8) -------------------------------------------
#
# mount(8) costs a fork, an exec and libmount's own parse of mountinfo: 1-2 ms a call, on every
# stage, publish, unpublish and unstage. The calls the driver makes go straight to the kernel with
# the arguments mount(8) itself passes (util-linux 2.38 under strace):
#   mount -t xfs -o OPTS DEV DIR   →  mount(realpath(DEV), realpath(DIR), "xfs", <the VFS
#                                     flags of OPTS>, <its other options in order, or NULL>)
#   mount --bind SRC DIR           →  mount(realpath(SRC), realpath(DIR), NULL, MS_BIND, NULL)
#   mount -o remount,bind,ro DIR   →  mount(.., DIR, .., MS_REMOUNT|MS_BIND|MS_RDONLY|<the
#                                     per-mount flags mountinfo shows for DIR>, NULL)
#   umount [-l] DIR                →  umount2(DIR, 0 or MNT_DETACH)
# Anything else (a filesystem option not in _FS_DATA_OPTIONS, userspace options, a source that is
# not a block device, a mount libmount tracks in utab) goes to the tool, and so does every mount the
# kernel refuses: mount(8) may still succeed (it retries a write-protected device read-only), and
# when it fails too, its CommandError carries mount(8)'s message and the type of the kernel's errno.
# An unmount the kernel refuses is not retried with umount(8), which would only fail the same way.

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_SYNCHRONOUS = 0x10
MS_REMOUNT = 0x20
MS_DIRSYNC = 0x80
MS_NOSYMFOLLOW = 0x100
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
MS_LAZYTIME = 0x2000000
MNT_DETACH = 0x2

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
# The per-mount flags the kernel prints in mountinfo field 6, which libmount carries over into a
# remount; "rw" is the absence of MS_RDONLY.
_MOUNTINFO_FLAGS: dict[str, int] = {
    "rw": 0,
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "nosymfollow": MS_NOSYMFOLLOW,
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


def _fast_mount(device: str, target: str, fs_type: str, options: Sequence[str]) -> bool:
    """mount(2) as mount(8) would call it; False when the call is the tool's to make. OSError
    when the kernel refuses."""
    arguments = mount_arguments(fs_type, options)
    if arguments is None or fs_type not in _FAST_FS_TYPES or not _is_block_device(device):
        return False
    flags, data = arguments
    sys_mount(os.path.realpath(device), os.path.realpath(target), fs_type, flags, data)
    return True


def _fast_bind(source: str, target: str) -> bool:
    sys_mount(os.path.realpath(source), os.path.realpath(target), None, MS_BIND)
    return True


def _fast_remount_read_only(target: str, probe: StatmountProbe, lookups: SharedLookups) -> bool:
    path = os.path.realpath(target)
    entry = find_mount(path, probe, lookups)
    if entry is None:
        return False
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for option in entry.options:
        bit = _MOUNTINFO_FLAGS.get(option)
        if bit is None:  # a per-mount flag this table does not know: keep mount(8)'s merge
            return False
        flags |= bit
    sys_mount(None, path, None, flags)
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


def _unmount(path: str, lazy: bool, lookups: SharedLookups) -> None:
    try:
        _unmount_now(path, lazy)
    finally:
        lookups.changed()


def _unmount_now(path: str, lazy: bool) -> None:
    flags = MNT_DETACH if lazy else 0
    if not _in_utab(path):
        try:
            sys_umount(path, flags)
        except OSError as exc:
            raise syscall_error("umount2", path, exc) from exc
        return
    try:
        run(["umount", "-l", path] if lazy else ["umount", path])
    except CommandError as exc:
        # umount(8)'s exit status says only that it failed; the kernel says why.
        try:
            sys_umount(path, flags)
        except OSError as again:
            raise command_error(
                exc.argv, exc.returncode, exc.stdout, exc.stderr, errno=again.errno
            ) from exc
        log.debug("umount(8) failed (%s), umount2(2) did not; %s is unmounted", exc, path)


class LinuxMounts:
    def __init__(self) -> None:
        # Learnt at the first lookup the kernel can't answer by statmount(2); mountinfo after.
        self.statmount = StatmountProbe()
        # Where that is mountinfo, one RPC's lookups share a parse (shared_lookups()).
        self.lookups = SharedLookups()

    def mount(self, device: str, target: str, fs_type: str, options: Sequence[str]) -> None:
        argv = ["mount", "-t", fs_type]
        if options:
            argv += ["-o", ",".join(options)]
        _fast_or_tool(
            functools.partial(_fast_mount, device, target, fs_type, options),
            [*argv, device, target],
            self.lookups,
        )

    def bind(self, source: str, target: str, *, read_only: bool) -> None:
        _fast_or_tool(
            functools.partial(_fast_bind, source, target),
            ["mount", "--bind", source, target],
            self.lookups,
        )
        if not read_only:
            return
        # A bind can't be made read-only in the same call; if the remount fails, don't leave a
        # writable bind behind where a read-only one was asked for.
        try:
            _fast_or_tool(
                functools.partial(_fast_remount_read_only, target, self.statmount, self.lookups),
                ["mount", "-o", "remount,bind,ro", target],
                self.lookups,
            )
        except CommandError:
            try:
                run(["umount", target])
            finally:
                self.lookups.changed()
            raise

    def unmount(self, target: str, *, lazy: bool = False) -> None:
        path = os.path.realpath(target)
        if self.find(path) is None:
            return
        try:
            _unmount(path, lazy, self.lookups)
        except CommandError:
            if self.find(path) is None:  # someone else unmounted it meanwhile
                return
            raise

    def find(self, target: str) -> MountEntry | None:
        return find_mount(os.path.realpath(target), self.statmount, self.lookups)

    def shared_lookups(self) -> AbstractContextManager[None]:
        return self.lookups.scope()

    def list(self) -> list[MountEntry]:
        return [record.entry for record in read_mountinfo()]

    def holders(self, target: str) -> tuple[Holder, ...]:
        path = os.path.realpath(target)
        if self.find(path) is None:
            return ()  # else everyone on the filesystem beneath would be named
        return tuple(holders_of_path(path))
