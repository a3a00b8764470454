"""Device nodes of loop devices, made by the driver itself where /dev lacks them.

A node plugin's /dev is not always the host's devtmpfs. A kind node is a privileged container
whose /dev is a tmpfs holding copies of the host's nodes as they were when it started, and no
udev runs there: a loop device the kernel adds later (LOOP_CTL_GET_FREE adds one whenever none is
free) has no /dev/loopN, nor has one whose node was not copied, and nothing in the container will
ever make it, so waiting for it is no use. Every open of a loop device or of loop-control goes
through here first: a missing node is made with mknod from the numbers the kernel gives in sysfs
(/sys/block/loopN/dev, /sys/class/misc/loop-control/dev), and a node whose numbers are not the
kernel's is refused before it is opened: a configure through it would reach another device.
"""

from __future__ import annotations

import errno
import grp
import os
import re
import stat

from csi_hostpath.system.errors import DeviceNodeError
from csi_hostpath.system.linux._log import log

LOOP_CONTROL = "/dev/loop-control"
SYS_BLOCK = "/sys/block"
SYS_LOOP_CONTROL = "/sys/class/misc/loop-control/dev"
# What udev's rules give disks on the common distributions. Used only where /dev holds no loop
# node to copy from: those a container got at start are the host's, made under the host's rules.
DEFAULT_MODE = 0o660
DEFAULT_GROUP = "disk"
_LOOP_NODE = re.compile(r"loop\d+")
# Another process removing a node as fast as it is made (mknod says EEXIST, stat then finds
# nothing) is given this many rounds before it is reported.
_ROUNDS = 3
_PRIVILEGED = (
    "run the node plugin privileged (securityContext.privileged: true), so that its device "
    "rules allow loop devices and making their nodes in /dev"
)


def sys_rdev(path: str) -> int | None:
    """The device number in a sysfs `dev` attribute ("7:3"); None when it is not there (the
    device is gone, or the kernel never had it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 64)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
            return None
        raise
    major, minor = raw.decode("ascii").strip().split(":")
    return os.makedev(int(major), int(minor))


def _numbers(rdev: int) -> str:
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _what(st: os.stat_result) -> str:
    if stat.S_ISBLK(st.st_mode):
        return f"the block device {_numbers(st.st_rdev)}"
    if stat.S_ISCHR(st.st_mode):
        return f"the character device {_numbers(st.st_rdev)}"
    return "not a device node"


def _is_node(path: str, kind: int, rdev: int) -> bool:
    """Is path the node of rdev? False when nothing is there; DeviceNodeError when something
    else is."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if stat.S_IFMT(st.st_mode) == kind and st.st_rdev == rdev:
        return True
    kind_name = "block" if kind == stat.S_IFBLK else "character"
    raise DeviceNodeError(
        f"{path} is {_what(st)}, not the kernel's {kind_name} device {_numbers(rdev)}: refusing "
        f"to use it, it would reach another device. Remove it (`rm {path}`) and the driver makes "
        "the right one; whatever made it may make it again"
    )


def _permissions(directory: str) -> tuple[int, int, int]:
    """(mode, uid, gid) for a new node: a loop node's already in directory, else 0660 root:disk."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not _LOOP_NODE.fullmatch(entry.name):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISBLK(st.st_mode):
                    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    except OSError:
        pass  # the defaults below
    try:
        gid = grp.getgrnam(DEFAULT_GROUP).gr_gid
    except KeyError:
        gid = 0
    return DEFAULT_MODE, 0, gid


def make_node(path: str, kind: int, rdev: int) -> bool:
    """Make the node of rdev at path unless it is there already; True when made here. One that
    someone else (devtmpfs, udev, another thread) makes at the same moment is as good, if its
    numbers are rdev's."""
    for _ in range(_ROUNDS):
        if _is_node(path, kind, rdev):
            return False
        mode, uid, gid = _permissions(os.path.dirname(path))
        try:
            # Owner-only until chown and chmod are done: never wider than it ends up.
            os.mknod(path, kind | 0o600, rdev)
        except FileExistsError:
            continue  # made meanwhile: checked on the next round
        except OSError as exc:
            raise DeviceNodeError(
                f"{path} (device {_numbers(rdev)}) is missing from /dev and can't be made: "
                f"mknod: {exc.strerror}. {_PRIVILEGED}, with /dev writable"
            ) from exc
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        log.info("made %s (%s): /dev had no node for it", path, _numbers(rdev))
        return True
    if _is_node(path, kind, rdev):
        return False
    raise DeviceNodeError(f"{path} keeps vanishing while it is made: something else removes it")


# Loop device N -> its number, as sysfs gave it. A loop device's number is fixed while the
# driver is loaded (LOOP_MAJOR, N << part_shift), so a node checked once against sysfs is
# checked after with one stat: a sysfs read cost three stats here, and every open of a loop
# device passes through loop_node. Anything else than the number known sends it back to sysfs.
_numbers_of: dict[int, int] = {}


def loop_node(index: int) -> bool:
    """See that /dev/loopN is the node of the kernel's loop device N, making it if /dev has
    none; False when the kernel has no loop device N (never had, or removed it)."""
    path = f"/dev/loop{index}"
    known = _numbers_of.get(index)
    if known is not None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISBLK(st.st_mode) and st.st_rdev == known:
                return True
    rdev = sys_rdev(f"{SYS_BLOCK}/loop{index}/dev")
    if rdev is None:
        _numbers_of.pop(index, None)
        return False
    make_node(path, stat.S_IFBLK, rdev)
    _numbers_of[index] = rdev
    return True


def control_node(path: str = LOOP_CONTROL, sys_dev: str = SYS_LOOP_CONTROL) -> bool:
    """See that path is the kernel's loop-control, making it if /dev has none; True when made
    here. DeviceNodeError, saying what to do, when it can't be had."""
    rdev = sys_rdev(sys_dev)
    if rdev is not None:
        return make_node(path, stat.S_IFCHR, rdev)
    if os.path.exists(path):
        # No loop driver loaded yet, but a node (the static one kmod lists for the module's
        # alias): opening it loads the driver.
        return False
    raise DeviceNodeError(
        f"{path} does not exist and the kernel has no loop driver loaded ({sys_dev} is "
        "missing): load it on the host, `modprobe loop` (a container shares the host's kernel, "
        "so it is the host that needs it), then retry"
    )


def open_control(path: str = LOOP_CONTROL, sys_dev: str = SYS_LOOP_CONTROL) -> int:
    """loop-control, open read-write, its node made first if /dev has none."""
    control_node(path, sys_dev)
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise DeviceNodeError(f"{path} can't be opened: {exc.strerror}. {_PRIVILEGED}") from exc
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ENXIO):
            raise DeviceNodeError(
                f"{path} can't be opened: {exc.strerror}; the loop driver is not loaded: "
                "load it on the host, `modprobe loop`, then retry"
            ) from exc
        raise
