"""Test-side cleanup that does not trust the code under test: every mount below a test's work
directory is unmounted and every loop device backed by a file below it is detached."""

from __future__ import annotations

import glob
import os
import subprocess
import time
from pathlib import Path


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


def loops_backed_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    found = []
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            path = Path(backing).read_text().strip()
        except OSError:
            continue
        if path.startswith(prefix):
            found.append("/dev/" + backing.split("/")[3])
    return found


def cleanup_kernel(root: Path) -> None:
    # Found before anything is unmounted: a backing file on a filesystem mounted below root
    # (a test's small tmpfs pool) no longer shows under root once that mount is detached.
    before = loops_backed_under(root)
    for _ in range(3):
        points = sorted(mounts_under(root), key=len, reverse=True)
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        if not mounts_under(root):
            break
    for dev in before:
        subprocess.run(["losetup", "-d", dev], capture_output=True, check=False)
    for _ in range(50):
        devices = loops_backed_under(root)
        if not devices:
            return
        for dev in devices:
            subprocess.run(["losetup", "-d", dev], capture_output=True, check=False)
        time.sleep(0.1)


def is_root() -> bool:
    return os.geteuid() == 0
