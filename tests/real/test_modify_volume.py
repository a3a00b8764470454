"""ModifyVolume with real effects, on real loop devices and a real blkio cgroup.

A pod's cgroup (found by the UID that podInfoOnMount puts in NodePublish's volume_context) gets a
byte-rate limit; dd reading the volume from inside that cgroup stays under 120% of it; the limit
is lifted and the rate recovers. Read-ahead and direct I/O land on the loop device itself."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath._pb import csi_pb2 as pb
from tests.support import helpers as h
from tests.support.processes import wait_for

BLKIO = Path("/sys/fs/cgroup/blkio")
LIMIT = 4 * h.MiB
READ_MIB = 12
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"


@pytest.fixture
def pod_cgroup() -> Iterator[tuple[str, Path]]:
    """A kubelet-shaped pod cgroup (kubepods/pod<uid>) under the v1 blkio hierarchy."""
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        pytest.skip("needs cgroup v1 blkio (blkio.throttle.*) on this machine")
    uid = str(uuid.uuid4())
    parent = BLKIO / f"csihp-test-{uid[:8]}"
    pod = parent / f"pod{uid}"
    pod.mkdir(parents=True)
    try:
        yield uid, pod
    finally:
        for cgroup in (pod, parent):
            with contextlib.suppress(OSError):
                cgroup.rmdir()


def rule(cgroup: Path, device: str) -> int:
    """The cgroup's read_bps rule for the device, 0 when it has none."""
    major_minor = device_numbers(device)
    for line in (cgroup / "blkio.throttle.read_bps_device").read_text().splitlines():
        numbers, value = line.split()
        if numbers == major_minor:
            return int(value)
    return 0


def device_numbers(device: str) -> str:
    name = Path(device).name
    return (Path("/sys/block") / name / "dev").read_text().strip()


def read_rate(cgroup: Path, target: Path) -> float:
    """MiB/s of a direct read of the volume by a process inside the cgroup."""
    script = (
        f"echo $$ > {cgroup}/cgroup.procs && exec dd if={target} of=/dev/null bs=1M "
        f"count={READ_MIB} iflag=direct status=none"
    )
    start = time.monotonic()
    subprocess.run(["sh", "-c", script], check=True, timeout=120)
    return READ_MIB / (time.monotonic() - start)


def modify(client: Any, volume_id: str, **params: str) -> None:
    client.controller.ControllerModifyVolume(
        pb.ControllerModifyVolumeRequest(volume_id=volume_id, mutable_parameters=params)
    )


def test_byte_rate_limit_holds_in_the_pods_cgroup_and_lifts(
    spawn: Any, workdir: Path, pod_cgroup: tuple[str, Path]
) -> None:
    uid, cgroup = pod_cgroup
    _, client = spawn("mod", "--fence-interval", "0.5")
    vid, staging, target = h.block_in_use(
        client, workdir, "limited", 64 * h.MiB, volume_context={POD_UID_KEY: uid}
    )
    device = _device_of(target)
    try:
        unlimited = read_rate(cgroup, target)

        # The volume is published: the change reaches the node on its next fence pass.
        modify(client, vid, readBytesPerSecond=str(LIMIT), readAheadKiB="256", directIO="true")
        wait_for(lambda: rule(cgroup, device) == LIMIT, 10, "the limit in the pod's cgroup")
        limited = read_rate(cgroup, target)
        print(f"unlimited {unlimited:.1f} MiB/s, limited {limited:.2f} MiB/s at 4 MiB/s")
        assert limited <= 1.2 * LIMIT / h.MiB, f"{limited:.2f} MiB/s under a 4 MiB/s limit"
        name = Path(device).name
        assert (Path("/sys/block") / name / "queue" / "read_ahead_kb").read_text().strip() == "256"
        assert (Path("/sys/block") / name / "loop" / "dio").read_text().strip() == "1"

        modify(client, vid, readBytesPerSecond="0")
        wait_for(lambda: rule(cgroup, device) == 0, 10, "the limit lifted")
        lifted = read_rate(cgroup, target)
        print(f"lifted {lifted:.1f} MiB/s")
        assert lifted > 3 * LIMIT / h.MiB, f"{lifted:.2f} MiB/s after the limit was lifted"
    finally:
        h.release(client, vid, staging, target)
    assert rule(cgroup, device) == 0, "a lifted or unstaged volume leaves no rule behind"


def _device_of(target: Path) -> str:
    """The loop device behind a published block target (a bind of the device node)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(target):
            match = re.fullmatch(r"/(loop[0-9]+)", fields[3])
            if match:
                return f"/dev/{match.group(1)}"
    raise AssertionError(f"{target} is not a loop device bind")
