"""The system layer on a real Linux kernel: sparse files, loop ioctls, mkfs/mount tools, mountinfo.

One module per part: linux_pool (backing files), linux_loop (loop devices, block device size),
linux_mounts (mountinfo, mount(2) fast paths), linux_fs (filesystems). This module builds the
System from them and re-exports the names other modules import from here.
"""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.system.base import System
from csi_hostpath.system.errors import DeviceNodeError
from csi_hostpath.system.iolimits import LinuxIoTuner
from csi_hostpath.system.linux.devnodes import LOOP_CONTROL, SYS_LOOP_CONTROL, control_node
from csi_hostpath.system.linux.fs import (
    FIFREEZE,
    FITHAW,
    FS_IOC_SHUTDOWN,
    FS_SHUTDOWN_NOSYNC,
    LinuxFs,
)
from csi_hostpath.system.linux.loop import LinuxDevices, LinuxLoop
from csi_hostpath.system.linux.loop_ioctl import (
    BLKGETSIZE64,
    BLKROSET,
    LO_FLAGS_DIRECT_IO,
    LO_FLAGS_READ_ONLY,
    LOOP_CLR_FD,
    LOOP_CONFIGURE,
    LOOP_CTL_GET_FREE,
    LOOP_GET_STATUS64,
    LOOP_SET_CAPACITY,
    encode_tag,
    loop_index,
)
from csi_hostpath.system.linux.mountinfo import (
    MOUNTINFO,
    MountRecord,
    escape_mountinfo,
    parse_mountinfo,
    read_mountinfo,
    read_mountinfo_at,
    topmost,
    unescape_mountinfo,
)
from csi_hostpath.system.linux.mounts import LinuxMounts, mount_arguments
from csi_hostpath.system.linux.pool import FICLONE, LinuxPool
from csi_hostpath.system.runner import missing_tools

__all__ = [
    "BLKGETSIZE64",
    "BLKROSET",
    "FICLONE",
    "FIFREEZE",
    "FITHAW",
    "FS_IOC_SHUTDOWN",
    "FS_SHUTDOWN_NOSYNC",
    "LOOP_CLR_FD",
    "LOOP_CONFIGURE",
    "LOOP_CONTROL",
    "LOOP_CTL_GET_FREE",
    "LOOP_GET_STATUS64",
    "LOOP_SET_CAPACITY",
    "LO_FLAGS_DIRECT_IO",
    "LO_FLAGS_READ_ONLY",
    "MOUNTINFO",
    "SYS_LOOP_CONTROL",
    "LinuxDevices",
    "LinuxFs",
    "LinuxLoop",
    "LinuxMounts",
    "LinuxPool",
    "MountRecord",
    "encode_tag",
    "escape_mountinfo",
    "linux_system",
    "loop_index",
    "mount_arguments",
    "parse_mountinfo",
    "read_mountinfo",
    "read_mountinfo_at",
    "topmost",
    "unescape_mountinfo",
]


# The tools a node runs on every stage (mkfs.xfs and the growers only when asked for).
NODE_TOOLS = ("blkid", "mkfs.ext4", "mount", "umount")


def machine_problems() -> list[str]:
    """What keeps this machine from attaching, formatting and mounting (empty when nothing)."""
    found = []
    try:
        # Made here if /dev lacks it (a static /dev), as the first attach would make it.
        control_node()
    except DeviceNodeError as exc:
        found.append(str(exc))
    else:
        if not os.access(LOOP_CONTROL, os.R_OK | os.W_OK):
            found.append(f"{LOOP_CONTROL} is not usable: is the node plugin privileged?")
    missing = missing_tools(NODE_TOOLS)
    if missing:
        found.append(f"tools missing from PATH: {', '.join(missing)}")
    return found


def linux_system(pool_root: Path) -> System:
    return System(
        pool=LinuxPool(pool_root),
        loop=LinuxLoop(),
        fs=LinuxFs(),
        mounts=LinuxMounts(),
        devices=LinuxDevices(),
        io=LinuxIoTuner(),
        readiness=machine_problems,
    )
