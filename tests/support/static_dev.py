"""A mount namespace shaped like a privileged container's (a kind node's): /dev is a fresh tmpfs
holding copies of a few of the host's device nodes, made when it started, and no udev runs.
A loop device the kernel adds later gets no node there; devtmpfs makes nodes only in the host's
/dev.

`static_dev(...)` is a command prefix (for `spawn(..., prefix=...)` or subprocess): it makes the
namespace, mounts the tmpfs on /dev, copies the nodes by their numbers (mknod) and execs the
command. Everything it mounts lives in that namespace only and goes with its last process.

`python -m tests.support.static_dev attach POOL TAG_PREFIX COUNT` is the driver's own attach
(LinuxLoop) run inside such a namespace: it attaches COUNT files, reports what it got as JSON on
stdout, and detaches every device it attached before it exits.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

from tests.support.processes import UNSHARE

# The character devices every container gets, copied from the host like the loop nodes.
_BASIC = ("null", "zero", "full", "random", "urandom")


def loop_indices() -> list[int]:
    """The numbers of the loop devices the kernel has now (bound or not)."""
    names = (re.fullmatch(r"loop(\d+)", name) for name in os.listdir("/sys/block"))
    return sorted(int(m.group(1)) for m in names if m)


def _mknod(path: str, kind: str, rdev: int, mode: int) -> str:
    return f"mknod -m {mode:o} {path} {kind} {os.major(rdev)} {os.minor(rdev)}"


def _sys_rdev(index: int) -> int:
    major, minor = Path(f"/sys/block/loop{index}/dev").read_text().strip().split(":")
    return os.makedev(int(major), int(minor))


def static_dev(
    loop_nodes: int = 2,
    *,
    loop_control: bool = True,
    kernel_without_loop_control: bool = False,
    nodes: dict[int, int] | None = None,
) -> list[str]:
    """The prefix that runs a command in a new mount namespace whose /dev holds the basic
    character devices, loop-control (unless loop_control is False) and /dev/loop0 ..
    /dev/loop{loop_nodes - 1}, numbered as the kernel numbers them. nodes adds /dev/loopN with
    the numbers given (index -> rdev), the wrong ones a test may want. With
    kernel_without_loop_control, sysfs shows no loop-control either: the kernel as it is before
    `modprobe loop`, as far as anything in the namespace can tell."""
    lines = [
        "set -e",
        "mount -t tmpfs -o mode=0755,size=1m csihp-static-dev /dev",
        "mkdir /dev/shm /dev/pts",
    ]
    for name in _BASIC:
        st = os.stat(f"/dev/{name}")
        lines.append(_mknod(f"/dev/{name}", "c", st.st_rdev, stat.S_IMODE(st.st_mode)))
    if loop_control:
        st = os.stat("/dev/loop-control")
        lines.append(_mknod("/dev/loop-control", "c", st.st_rdev, 0o600))
    for index in range(loop_nodes):
        lines.append(_mknod(f"/dev/loop{index}", "b", _sys_rdev(index), 0o600))
    for index, rdev in (nodes or {}).items():
        lines.append(_mknod(f"/dev/loop{index}", "b", rdev, 0o600))
    if kernel_without_loop_control:
        # /sys/class/misc/loop-control is a symlink; mount follows it to the device's directory.
        lines.append("mount -t tmpfs -o size=4k csihp-no-loop /sys/class/misc/loop-control")
    lines.append('exec "$@"')
    script = "\n".join(lines)
    return [*UNSHARE, "--", "sh", "-c", script, "static-dev"]


def attach_command(pool: Path, tag_prefix: str, count: int) -> list[str]:
    """`attach` below, run inside a static /dev."""
    args = [
        sys.executable,
        "-m",
        "tests.support.static_dev",
        "attach",
        str(pool),
        tag_prefix,
        str(count),
    ]
    return [*static_dev(), *args]


def _permissions(st: os.stat_result) -> tuple[int, int, int]:
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def _attach(pool: Path, tag_prefix: str, count: int) -> dict[str, object]:
    from csi_hostpath.system.linux.loop import LinuxLoop

    loop = LinuxLoop()
    attached = []
    error = None
    try:
        for i in range(count):
            backing = pool / f"vol-{i}.img"
            with open(backing, "wb") as handle:
                handle.truncate(1 << 20)
            attached.append(loop.attach(backing, f"{tag_prefix}{i}"))
    except Exception as exc:  # reported to the test, which asserts on it
        error = f"{type(exc).__name__}: {exc}"
    seen = {}
    for device in attached:
        st = os.stat(device.path)
        index = int(device.path.removeprefix("/dev/loop"))
        seen[device.path] = {
            "block": stat.S_ISBLK(st.st_mode),
            "rdev_is_the_kernels": st.st_rdev == _sys_rdev(index),
            # What devtmpfs or udev gave the host's nodes: loop0 here is a copy of one.
            "like_loop0": _permissions(st) == _permissions(os.stat("/dev/loop0")),
            "found": loop.find(device.tag) == device,
        }
    for device in attached:
        loop.detach(device)
    return {"attached": [d.path for d in attached], "nodes": seen, "error": error}


if __name__ == "__main__":
    command, pool_dir, prefix, how_many = sys.argv[1:]
    assert command == "attach", shlex.join(sys.argv)
    print(json.dumps(_attach(Path(pool_dir), prefix, int(how_many))))
