"""Fixtures for the system-layer tests: one environment per implementation, and a teardown that
leaves no loop device, mount or directory behind, even when the test failed half-way.

The teardown deliberately does not trust the code under test: it reads mountinfo and sysfs itself
and uses util-linux to unmount and detach.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from csi_hostpath.system.base import LoopDevice, System
from csi_hostpath.system.fake import FakeKernel, fake_system
from csi_hostpath.system.linux import LinuxLoop, linux_system
from tests.conftest import LAYERS
from tests.support.kernel import release_loop
from tests.support.needs import missing_reason

TEMP_PREFIX = "csihp-test-"
# xfs is not among them: the xfs cases skip on their own (tests/support/needs.py), the rest
# still run.
REAL_TOOLS = ("mount", "umount", "blkid", "mkfs.ext4", "resize2fs", "losetup")
_CLEANUP_TIMEOUT = 30.0
_LOOP_GONE_WAIT = 5.0


def real_unavailable() -> str | None:
    """Why the real implementation can't be tested here, or None if it can."""
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists("/dev/loop-control"):
        return "needs /dev/loop-control"
    return missing_reason(*REAL_TOOLS)


@dataclass
class Env:
    """One implementation of the system layer, with a private directory and tag namespace."""

    kind: str
    system: System
    work: Path
    tag_prefix: str
    kernel: FakeKernel | None  # the fake's kernel, for tests that look behind the contract

    @property
    def real(self) -> bool:
        return self.kind == "real"

    @property
    def pool_dir(self) -> Path:
        return self.system.pool.root

    def tag(self, name: str) -> str:
        return self.tag_prefix + name

    def file(self, name: str, size_bytes: int) -> Path:
        path = self.pool_dir / name
        self.system.pool.create(path, size_bytes)
        return path

    def dir(self, name: str) -> str:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def attach(self, name: str, size_bytes: int, *, read_only: bool = False) -> LoopDevice:
        return self.system.loop.attach(
            self.file(name, size_bytes), self.tag(name), read_only=read_only
        )

    def formatted(self, name: str, size_bytes: int, fs_type: str = "ext4") -> LoopDevice:
        device = self.attach(name, size_bytes)
        self.system.fs.mkfs(device.path, fs_type)
        return device

    def mounted(self, name: str, size_bytes: int, fs_type: str = "ext4") -> tuple[LoopDevice, str]:
        device = self.formatted(name, size_bytes, fs_type)
        target = self.dir(f"mnt-{name}")
        self.system.mounts.mount(device.path, target, fs_type, [])
        return device, target


# --- teardown helpers (independent of the code under test) ---------------------------------------

_OCTAL = re.compile(r"\\([0-7]{3})")


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", "rb") as handle:
        text = handle.read().decode("utf-8", errors="surrogateescape")
    return [
        _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), line.split(" ")[4])
        for line in text.splitlines()
        if line
    ]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _quiet(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_CLEANUP_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _unmount_all(root: str) -> None:
    # A frozen filesystem can make umount wait forever; thaw whatever a failed test left frozen.
    for point in {p for p in _mount_points() if _under(p, root)}:
        _quiet(["fsfreeze", "--unfreeze", point])
    # Several rounds: stacked mounts come off one per umount, and a busy parent frees up once its
    # children are gone. Deepest first; lazily when a plain umount is refused.
    for _ in range(20):
        points = [p for p in _mount_points() if _under(p, root)]
        if not points:
            return
        for point in sorted(points, key=lambda p: (p.count("/"), len(p)), reverse=True):
            if not _quiet(["umount", point]):
                _quiet(["umount", "-l", point])


def _loops_to_release(root: str, tag_prefix: str) -> set[str]:
    devices: set[str] = set()
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            path = backing.read_text().rstrip("\n").removesuffix(" (deleted)")
        except OSError:  # detached meanwhile (by anyone on this kernel): ENOENT, ENXIO, ENODEV
            continue
        if _under(path, root):
            devices.add(f"/dev/{backing.parent.parent.name}")
    with contextlib.suppress(OSError):  # the backing-file scan above is the safety net
        devices.update(device.path for device in LinuxLoop().list(tag_prefix))
    return devices


def _detach_all(root: str, tag_prefix: str) -> set[str]:
    deadline = time.monotonic() + _LOOP_GONE_WAIT
    while True:
        left = _loops_to_release(root, tag_prefix)
        if not left or time.monotonic() > deadline:
            return left
        for device in left:
            # Checked again through the fd the detach goes through: the number may serve
            # another process's attach since the scan.
            release_loop(
                device,
                lambda held: (
                    _under(held.backing.removesuffix(" (deleted)"), root)
                    or held.tag.startswith(tag_prefix)
                ),
            )
        time.sleep(0.05)


def _remove_mount_points(points: set[str]) -> None:
    """Remove the directories (or files) the test mounted on, deepest first, once unmounted.
    A mount namespace another process made while they were mounted (a test that unshares, on
    this shared kernel) holds copies of those mounts, which umount here does not reach (the
    host's mounts are private) and which keep the loop devices open: detaching then only marks
    them autoclear. Removing a mount point detaches every copy of it (the kernel's
    d_invalidate), which is how the devices can go before the check below."""
    for point in sorted(points, key=lambda p: (p.count("/"), len(p)), reverse=True):
        with contextlib.suppress(OSError):  # not empty, still mounted, or gone: left to rmtree
            if os.path.isdir(point) and not os.path.islink(point):
                os.rmdir(point)
            else:
                os.unlink(point)


def _real_cleanup(root: str, tag_prefix: str) -> list[str]:
    mounted = {p for p in _mount_points() if _under(p, root) and p != root}
    _unmount_all(root)
    problems = [f"mount left: {p}" for p in _mount_points() if _under(p, root)]
    _remove_mount_points(mounted - set(_mount_points()))
    problems += [f"loop left: {d}" for d in sorted(_detach_all(root, tag_prefix))]
    return problems


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def tag_prefix() -> str:
    """A loop-tag namespace of this test alone."""
    return f"csihp-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def work_dir(tag_prefix: str) -> Iterator[Path]:
    """A directory under /tmp/csihp-test-*, removed with everything mounted or attached in it,
    and with every loop device tagged with this test's prefix."""
    root = os.path.realpath(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    try:
        yield Path(root)
    finally:
        problems = _real_cleanup(root, tag_prefix) if real_unavailable() is None else []
        shutil.rmtree(root, ignore_errors=not problems)
        if problems:
            pytest.fail("teardown could not clean up: " + "; ".join(problems))


@pytest.fixture(params=LAYERS)
def env(request: pytest.FixtureRequest, work_dir: Path, tag_prefix: str) -> Env:
    pool = work_dir / "pool"
    pool.mkdir()
    if request.param == "real":
        reason = real_unavailable()
        if reason is not None:
            pytest.skip(reason)
        return Env("real", linux_system(pool), work_dir, tag_prefix, None)
    kernel = FakeKernel()
    return Env("fake", fake_system(pool, kernel=kernel), work_dir, tag_prefix, kernel)
