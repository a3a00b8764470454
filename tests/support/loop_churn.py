"""Another process attaching and detaching loop devices in a loop, as the other users of a shared
kernel do (other test runs, other drivers, udev), so a test can show it holds with that going on.

`with loop_churn(): ...` runs the churn in a child process for the block's duration; run alone
(`python -m tests.support.loop_churn [SECONDS]`) it churns until killed or for SECONDS. Its devices
are backed by files in its own temporary directory: on the way out only those are detached.

`loop_churn(late_detaches=True)` adds a second child: another node plugin on the same kernel
(the driver's own Loop) whose every detach is made twice, the second one late, after its device
was released and its number may serve someone else's attach (a retried NodeUnstage, or a detach
whose device a holder released between the find and the detach).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.kernel import release_loop

BACKING_SIZE = 1 << 20


def _detach_backed_under(root: str) -> int:
    """Detach the devices backed by files below root; how many there were."""
    found = 0
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            path = backing.read_text().rstrip("\n").removesuffix(" (deleted)")
        except OSError:  # detached meanwhile, by anyone on this kernel
            continue
        if path.startswith(root + "/"):
            device = f"/dev/{backing.parent.parent.name}"
            # Checked again through the fd the detach goes through: the number may serve
            # another process's attach since the read above.
            release_loop(device, lambda held: held.backing.startswith(root + "/"))
            found += 1
    return found


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the churn and the losetup it may be running (a losetup left alive would attach
    after the sweep below), then wait until none of them is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(timeout=20)  # reaped: a zombie would still count as one of the group
    for _ in range(200):
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def churn(root: str, parent: int) -> None:
    """Attach and detach, one device at a time, each of two backing files in turn, for as long
    as parent (the process that started it) lives."""
    files = []
    for name in ("a", "b"):
        path = os.path.join(root, name)
        with open(path, "wb") as f:
            f.truncate(BACKING_SIZE)
        files.append(path)
    try:
        while True:
            for path in files:
                if os.getppid() != parent:  # the test was killed without its cleanup
                    return  # and sweeps
                done = subprocess.run(
                    ["losetup", "--find", "--show", path],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                device = done.stdout.strip()
                if done.returncode == 0 and device:
                    subprocess.run(["losetup", "-d", device], capture_output=True, check=False)
    finally:
        _detach_backed_under(root)


def late_detach_churn(root: str, parent: int) -> None:
    """The driver's attach and detach, each detach made again a moment later, for as long as
    parent lives."""
    from csi_hostpath.system.linux import LinuxLoop

    loop = LinuxLoop()
    backing = Path(root) / "late"
    with open(backing, "wb") as f:
        f.truncate(BACKING_SIZE)
    rounds = 0
    while os.getppid() == parent:
        rounds += 1
        try:
            device = loop.attach(backing, f"csihp-churn-late:{os.getpid()}:{rounds}")
        except OSError:
            continue  # lost its own device to someone else's detach: try again
        loop.detach(device)
        time.sleep(0.002)  # long enough for another process to attach the number just freed
        loop.detach(device)


def _spawn(call: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", f"from tests.support.loop_churn import *; {call}"],
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )


@contextlib.contextmanager
def loop_churn(*, late_detaches: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    root = os.path.realpath(tempfile.mkdtemp(prefix="csihp-churn-"))
    # The children run in sessions of their own and so outlive a test killed without its
    # cleanup; they watch for that and stop (the churn then sweeps).
    children = [_spawn(f"churn({root!r}, {os.getpid()})")]
    try:
        if late_detaches:
            children.append(_spawn(f"late_detach_churn({root!r}, {os.getpid()})"))
        yield children[0]
    finally:
        for child in children:
            _stop_group(child)
        for _ in range(100):  # a device in rundown may need a moment before it goes
            if not _detach_backed_under(root):
                break
            time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    # The churn runs in a session of its own: a SIGTERM here must still end it and sweep.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt), loop_churn() as proc:
        if len(sys.argv) > 1:
            time.sleep(float(sys.argv[1]))
        else:
            proc.wait()
