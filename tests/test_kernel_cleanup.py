"""The tests' own cleanup (tests/kernel.py) leaves nothing on the shared kernel, even a
filesystem a killed test left frozen."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.kernel import cleanup_kernel, loops_backed_under, mounts_under

pytestmark = pytest.mark.real


def _frozen_mount(workdir: Path) -> tuple[str, Path]:
    image = workdir / "vol.img"
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    point = workdir / "m"
    point.mkdir()
    subprocess.run(["mount", device, str(point)], check=True)
    subprocess.run(["fsfreeze", "--freeze", str(point)], check=True)
    return device, point


def test_a_frozen_mount_is_thawed_and_released(workdir: Path) -> None:
    _frozen_mount(workdir)
    cleanup_kernel(workdir)
    assert mounts_under(workdir) == [] and loops_backed_under(workdir) == []


def test_a_frozen_filesystem_no_mount_reaches_is_thawed_and_released(workdir: Path) -> None:
    """As a test killed inside a freeze window leaves it: unmounted lazily while frozen, so the
    superblock, and the loop device under it, stay until someone thaws them."""
    _device, point = _frozen_mount(workdir)
    subprocess.run(["umount", "-l", str(point)], check=True)
    assert mounts_under(workdir) == []
    cleanup_kernel(workdir)
    assert loops_backed_under(workdir) == []
