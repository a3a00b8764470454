"""NodeGetInfo's volume limit follows the kernel's loop devices, on real devices.

NodeGetInfo's max_volumes_per_node follows the kernel's loop devices: devices another process
takes (losetup here; another node plugin on a shared kernel in kind) lower it by as many, and
giving them back raises it again. The kubelet copies it into CSINode's allocatable count."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, in_process

TAKEN = 3
# Other tests and helpers on this shared kernel attach and detach loop devices too; a reading is
# only compared within a quiet moment, and a moment spoiled by their churn is tried again.
ATTEMPTS = 8


def limit(client: Client) -> int:
    value = client.node.NodeGetInfo(pb.NodeGetInfoRequest()).max_volumes_per_node
    assert isinstance(value, int)
    return value


@contextmanager
def loop_devices_taken(workdir: Path, count: int) -> Iterator[list[str]]:
    """count sparse files attached with losetup, as any other process on the kernel would;
    always detached afterwards."""
    devices: list[str] = []
    try:
        for i in range(count):
            backing = workdir / f"other-{i}.img"
            with open(backing, "wb") as handle:
                handle.truncate(1 << 20)
            attached = subprocess.run(
                ["losetup", "--find", "--show", str(backing)],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
            devices.append(attached.stdout.strip())
        yield devices
    finally:
        for device in devices:
            subprocess.run(["losetup", "--detach", device], check=False, timeout=30)


def test_limit_drops_by_the_loop_devices_others_take_and_rises_again(
    driver: Client, workdir: Path
) -> None:
    seen: list[tuple[int, int, int]] = []
    for _ in range(ATTEMPTS):
        before = limit(driver)
        with loop_devices_taken(workdir, TAKEN):
            during = limit(driver)
        after = limit(driver)
        seen.append((before, during, after))
        if during == before - TAKEN and after == before:
            break
    else:
        raise AssertionError(f"(before, with {TAKEN} taken, after) never matched: {seen}")
    # No --max-volumes-per-node: the limit is the kernel's, never 0 (0 tells the kubelet "none").
    assert before > TAKEN


def test_the_flag_caps_the_limit_where_devices_are_plentiful(workdir: Path) -> None:
    with in_process(workdir, "capped", "--max-volumes-per-node", "5") as client:
        assert limit(client) == 5  # this kernel can make far more than 5 loop devices
