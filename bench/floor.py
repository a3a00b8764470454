"""(a) The floor: the lifecycle's kernel work done directly with the command-line tools, spawned
from Python the same way the driver spawns them (argv list, captured output).

ext4/xfs: truncate → losetup --direct-io=on --find --show → mkfs (the driver's exact options) →
mount → umount → losetup -d → rm. block: truncate → losetup → losetup -d → rm. The mount point
directory is made beforehand, as the CO makes the staging directory before NodeStageVolume.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

# The driver's mkfs options (csi_hostpath/system/linux/fs.py, _MKFS): lazy init keeps mkfs fast.
MKFS: dict[str, list[str]] = {
    "ext4": ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
}


def _run(argv: list[str]) -> str:
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def floor_once(work: Path, kind: str, index: int, size: int) -> dict[str, float]:
    """One pass; returns the seconds of each step and "total". Cleans up whatever happens."""
    image = work / f"{kind}-{index}.img"
    point = work / f"mnt-{kind}-{index}"
    point.mkdir(parents=True, exist_ok=True)
    steps: dict[str, float] = {}
    device = ""
    mounted = False

    def step(name: str, argv: list[str]) -> str:
        start = time.perf_counter()
        out = _run(argv)
        steps[name] = time.perf_counter() - start
        return out

    try:
        step("truncate", ["truncate", "-s", str(size), str(image)])
        device = step(
            "losetup", ["losetup", "--direct-io=on", "--find", "--show", str(image)]
        ).strip()
        if kind != "block":
            step("mkfs", [*MKFS[kind], device])
            step("mount", ["mount", "-t", kind, device, str(point)])
            mounted = True
            step("umount", ["umount", str(point)])
            mounted = False
        step("losetup -d", ["losetup", "-d", device])
        device = ""
        step("rm", ["rm", "-f", str(image)])
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
        if device:
            subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
        image.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            point.rmdir()
    steps["total"] = sum(steps.values())
    return steps
