"""Test-side cleanup that does not trust the code under test: every mount below a test's work
directory is unmounted and every loop device backed by a file below it is detached."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_LOOP_CLR_FD, _LOOP_GET_STATUS64, _BLKROSET = 0x4C01, 0x4C05, 0x125D


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape")


def mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = _unescape(line.split()[4])
            if point.startswith(prefix) or point == str(root):
                found.append(point)
    return found


def _status_of(fd: int) -> bytearray | None:
    """The struct loop_info64 of the open loop device fd; None when it is not configured."""
    try:
        buf = bytearray(232)  # sizeof(struct loop_info64)
        fcntl.ioctl(fd, _LOOP_GET_STATUS64, buf, True)
    except OSError:
        return None
    return buf


def _loop_status(device: str) -> bytearray | None:
    """The struct loop_info64 of a configured loop device; None when it is not (or going)."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _status_of(fd)
    finally:
        os.close(fd)


def _identity(buf: bytearray) -> tuple[int, int]:
    """(lo_device, lo_inode) of a struct loop_info64, lo_device as userspace encodes a dev_t."""
    kernel_dev, inode = struct.unpack_from("=2Q", buf)
    major, minor = (kernel_dev >> 8) & 0xFFF, (kernel_dev & 0xFF) | ((kernel_dev >> 12) & 0xFFF00)
    return os.makedev(major, minor), inode


def _backing_identity(device: str) -> tuple[int, int] | None:
    """(lo_device, lo_inode) of a configured loop device, as LOOP_GET_STATUS64 reports them."""
    buf = _loop_status(device)
    return None if buf is None else _identity(buf)


@dataclass(frozen=True)
class HeldLoop:
    """What a loop device is while an fd of it is open: it can't be released (the kernel does
    that at the last close) and so can't pass to another process's attach meanwhile."""

    backing: str  # /sys/block/loopN/loop/backing_file: the attaching process's view
    identity: tuple[int, int]  # the backing file's (st_dev, st_ino)
    tag: str  # lo_file_name (losetup puts the backing file's path there)


def _held(fd: int, device: str) -> HeldLoop | None:
    buf = _status_of(fd)
    if buf is None:
        return None
    try:
        backing = Path(f"/sys/block/{os.path.basename(device)}/loop/backing_file").read_text()
    except OSError:
        return None
    tag = bytes(buf[56:120]).split(b"\0", 1)[0].decode(errors="replace")  # lo_file_name
    return HeldLoop(backing.rstrip("\n"), _identity(buf), tag)


def held_loop(device: str) -> HeldLoop | None:
    """What device is now; None when it is not configured."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _held(fd, device)
    finally:
        os.close(fd)


def release_loop(device: str, ours: Callable[[HeldLoop], bool]) -> bool:
    """Detach device if ours() says so of what it is, asked and cleared through one open fd. A
    check by path followed by `losetup -d` by number cleared whatever took the number between
    the two (a device released by its last holder meanwhile, and attached anew by another
    test run or node plugin). Clears a read-only flag first, which would outlive the device.
    True when it was ours."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        held = _held(fd, device)
        if held is None or not ours(held):
            return False
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, _BLKROSET, struct.pack("i", 0))
        try:
            fcntl.ioctl(fd, _LOOP_CLR_FD, 0)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        return True
    finally:
        os.close(fd)


def backed_under(root: Path) -> Callable[[HeldLoop], bool]:
    """The test for release_loop: the backing file is below root, by the path the kernel
    reports or by its identity (the path is the attaching process's view)."""
    prefix = str(root).rstrip("/") + "/"
    files: set[tuple[int, int]] | None = None

    def ours(held: HeldLoop) -> bool:
        nonlocal files
        if held.backing.startswith(prefix):
            return True
        if files is None:
            files = _files_under(root)
        return held.identity in files

    return ours


def _same_attachment(was: HeldLoop) -> Callable[[HeldLoop], bool]:
    """The test for release_loop: the device still holds the attachment `was` describes, by its
    backing file's identity and its tag (the number may serve another process's attach by now)."""
    return lambda now: (now.identity, now.tag) == (was.identity, was.tag)


def _files_under(root: Path) -> set[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    top = os.lstat(root).st_dev if root.exists() else None
    for directory, subdirs, names in os.walk(root):
        # Never across a mount (a test's rbind of / would make this a walk of the whole host).
        subdirs[:] = [d for d in subdirs if os.lstat(os.path.join(directory, d)).st_dev == top]
        for name in names:
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            found.add((st.st_dev, st.st_ino))
    return found


def loops_backed_under(root: Path) -> list[str]:
    """Loop devices whose backing file is below root: by the path the kernel reports, or, since
    that path is the attaching process's view (another mount namespace or root, a container's),
    by the file's device and inode."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    files: set[tuple[int, int]] | None = None
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            path = Path(backing).read_text().strip()
        except OSError:
            continue
        device = "/dev/" + backing.split("/")[3]
        if path.startswith(prefix):
            found.append(device)
            continue
        if files is None:
            files = _files_under(root)
        if _backing_identity(device) in files:
            found.append(device)
    return found


# How long a released loop device may take to go: generous, it is only reached when one stays.
_RELEASE_DEADLINE = 30.0


def released_after_teardown(root: Path, *points: Path) -> list[str]:
    """What the CO does after NodeUnpublish and NodeUnstage, then the loop devices backed below
    root that are still there once they had the chance to go (none, when the driver detached).

    kubelet removes the pod's volume directory and the global staging directory once the plugin
    returns (kubernetes pkg/volume/csi: csiMountMgr.TearDownAt and csiAttacher.UnmountDevice,
    both through removeMountDir). On a shared kernel that matters: a mount namespace another
    process made while the volume was mounted holds a copy of the mount (the host's mounts are
    private, so umount doesn't reach it) and so the device, which LOOP_CLR_FD then only marks
    autoclear. Removing the mount point detaches those copies (the kernel's d_invalidate), and
    the device goes. A device the driver never detached stays, and is returned."""
    for point in points:
        with contextlib.suppress(FileNotFoundError):
            if point.is_dir() and not point.is_symlink():
                point.rmdir()
            else:
                point.unlink()
    deadline = time.monotonic() + _RELEASE_DEADLINE
    while True:
        left = loops_backed_under(root)
        if not left:
            return left
        # Still marked for release (only autoclear left) is worth waiting for; a device the
        # driver never detached is not, and is reported at once.
        pending = [dev for dev in left if autoclear_pending(dev)]
        if len(pending) < len(left) or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def autoclear_pending(device: str) -> bool:
    """Is the device detached already, only waiting for its last user to close it?"""
    buf = _loop_status(device)
    if buf is None:
        return True  # on its way out
    (flags,) = struct.unpack_from("=I", buf, 52)  # lo_flags, after 5 u64 and 3 u32
    return bool(flags & 4)  # LO_FLAGS_AUTOCLEAR


_deferred: list[Path] = []


def sweep_deferred() -> None:
    """Detach any loop device backed by a file below a root cleaned without `thorough`."""
    prefixes = tuple(str(root).rstrip("/") + "/" for root in _deferred)
    _deferred.clear()
    if not prefixes:
        return
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            path = Path(backing).read_text().strip()
        except OSError:
            continue
        if path.startswith(prefixes):
            device = "/dev/" + backing.split("/")[3]
            release_loop(device, lambda held: held.backing.startswith(prefixes))


def cleanup_kernel(root: Path, *, thorough: bool = True) -> None:
    """Unmount and detach what lies below root. thorough=False is for tests that are not marked
    real (the fake system layer, pure code): they have no business in the kernel, so a check by
    path is enough, and it opens none of the machine's loop devices."""
    if not thorough and not mounts_under(root):
        # A loop device left behind would show by path (its file deleted or not): looked for
        # once for all such tests when the session ends (sweep_deferred), instead of reading
        # every loop device on the machine after each of them. Anything mounted there after all
        # is cleared the full way, below.
        _deferred.append(root)
        return
    # Found before anything is unmounted: a backing file on a filesystem mounted below root
    # (a test's small tmpfs pool) no longer shows under root once that mount is detached. What
    # each one is, is kept: after the unmounts its number may serve another process's attach.
    under = backed_under(root)
    before: dict[str, HeldLoop] = {}
    for dev in loops_backed_under(root):
        held = held_loop(dev)
        if held is not None and under(held):
            before[dev] = held
    for _ in range(3):
        points = sorted(mounts_under(root), key=len, reverse=True)
        for point in points:
            # A frozen filesystem outlives its unmount (the kernel keeps a frozen superblock
            # active), and with it its loop device: thaw first. EINVAL (not frozen) is fine.
            subprocess.run(["fsfreeze", "--unfreeze", point], capture_output=True, check=False)
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        if not mounts_under(root):
            break
    for dev, was in before.items():
        release_loop(dev, _same_attachment(was))
    for attempt in range(50):
        devices = loops_backed_under(root)
        if not devices:
            return
        for dev in devices:
            if attempt == 10:
                thaw_orphaned(dev)
            release_loop(dev, backed_under(root))
        time.sleep(0.1)


def thaw_orphaned(device: str) -> None:
    """Thaw a filesystem frozen on device that no mount here reaches any more (unmounted while
    frozen, or mounted only in a namespace whose last process waits on the freeze): a second
    mount of the device gets the same superblock, and FITHAW through it releases the device."""
    point = Path(f"/tmp/thaw-{os.path.basename(device)}-{os.getpid()}")
    point.mkdir(exist_ok=True)
    try:
        mounted = subprocess.run(["mount", device, str(point)], capture_output=True, check=False)
        if mounted.returncode == 0:
            subprocess.run(["fsfreeze", "--unfreeze", str(point)], capture_output=True, check=False)
            subprocess.run(["umount", str(point)], capture_output=True, check=False)
    finally:
        point.rmdir()


def is_root() -> bool:
    return os.geteuid() == 0
