"""The system layer: everything the driver asks of the kernel and the host's tools.

Services import the contract from here and receive a :class:`System`; only the entry point picks
``linux.linux_system`` or, in tests, ``fake.fake_system``.
"""

from csi_hostpath.system.base import (
    CommandError,
    Devices,
    Fs,
    FsStats,
    Loop,
    LoopDevice,
    MountEntry,
    Mounts,
    NoSpace,
    Pool,
    System,
    SystemError_,
)

__all__ = [
    "CommandError",
    "Devices",
    "Fs",
    "FsStats",
    "Loop",
    "LoopDevice",
    "MountEntry",
    "Mounts",
    "NoSpace",
    "Pool",
    "System",
    "SystemError_",
]
