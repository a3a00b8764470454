"""The tests' own kernel cleanup leaves nothing behind, a frozen filesystem included.

The tests' own cleanup (tests/support/kernel.py) leaves nothing on the shared kernel, even a
filesystem a killed test left frozen."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.kernel import cleanup_kernel, loops_backed_under, mounts_under


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


def test_a_number_another_attach_took_after_the_unmount_is_left_alone(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device below workdir that was detached already, held only by its mount: the cleanup's
    unmount releases it, and another process's attach can take its number before the cleanup
    detaches what it found. That device is someone else's volume; only ours may go."""
    image = workdir / "vol.img"
    subprocess.run(["truncate", "-s", "32M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    point = workdir / "m"
    point.mkdir()
    subprocess.run(["mount", device, str(point)], check=True)
    subprocess.run(["losetup", "-d", device], check=True)  # mounted: only marked autoclear
    elsewhere = Path(tempfile.mkdtemp(prefix="csihp-test-other-"))
    foreign = elsewhere / "other.img"
    subprocess.run(["truncate", "-s", "8M", str(foreign)], check=True)
    bound = Path(f"/sys/block/{os.path.basename(device)}/loop/backing_file")
    real_run = subprocess.run
    taken: list[str] = []

    def run(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        done = real_run(argv, *args, **kwargs)
        if argv[0] == "umount" and not taken:
            for _ in range(200):  # the last close releases the device
                if not bound.exists():
                    break
                time.sleep(0.01)
            real_run(["losetup", device, str(foreign)], check=True)  # the other attach
            taken.append(device)
        return done

    monkeypatch.setattr(subprocess, "run", run)
    try:
        cleanup_kernel(workdir)
        monkeypatch.undo()
        assert taken == [device]
        assert bound.exists(), f"the cleanup detached {device}, which served {foreign} by then"
        assert bound.read_text().strip() == str(foreign)
        assert mounts_under(workdir) == [] and loops_backed_under(workdir) == []
    finally:
        monkeypatch.undo()
        cleanup_kernel(elsewhere)
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_a_churn_whose_test_was_killed_stops_and_sweeps_its_devices() -> None:
    """tests/support/loop_churn.py's child runs in a session of its own, so a test process killed
    without its cleanup (SIGKILL, or a timeout's SIGTERM) left it churning on the shared kernel
    for good, its losetups holding free devices open through their retry sleeps."""
    test = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from tests.support.loop_churn import loop_churn\n"
            "with loop_churn() as churn:\n"
            "    print(churn.pid, flush=True)\n"
            "    time.sleep(600)\n",
        ],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert test.stdout is not None
    churn = int(test.stdout.readline())
    while "churn(" not in (cmdline := Path(f"/proc/{churn}/cmdline").read_text()):
        time.sleep(0.01)  # forked, not yet the churn
    root = Path(cmdline.split("churn(")[1].split("'")[1])
    try:
        test.kill()
        test.wait()
        for _ in range(600):
            if not Path(f"/proc/{churn}").exists():
                break
            time.sleep(0.1)
        alive = Path(f"/proc/{churn}").exists()
        assert not alive, "the churn outlived its test"
        assert loops_backed_under(root) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(churn, signal.SIGKILL)
        cleanup_kernel(root)
        shutil.rmtree(root, ignore_errors=True)
