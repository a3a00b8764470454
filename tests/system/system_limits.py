"""The limits the system-layer tests work within: the smallest filesystem each mkfs makes, the
longest loop tag the kernel keeps, and the capability an online ext4 resize needs."""

from __future__ import annotations

from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
EXT4_SIZE = 64 * MiB
XFS_SIZE = 512 * MiB  # mkfs.xfs refuses anything below 300 MiB
MAX_TAG_BYTES = 63  # lo_file_name is 64 bytes with its NUL


CAP_SYS_RESOURCE = 24


def has_capability(number: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> number & 1)
    return False
