"""The pure arithmetic of NodeGetInfo's volume limit (core/volume_limit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.core.volume_limit import loop_room, node_volume_limit
from csi_hostpath.system.linux import loop_ioctl


@pytest.mark.parametrize(
    ("flag", "held", "free", "creatable", "expected"),
    [
        (0, 0, 3, 1_048_570, 1_048_573),  # no flag: what the kernel still gives, plus held
        (0, 2, 1, 5, 8),
        (16, 2, 1, 5, 8),  # the kernel is the tighter bound
        (4, 2, 1, 5, 4),  # the flag is
        (4, 6, 0, 0, 4),  # holding more than the flag (lowered since): still the flag
        (0, 3, 0, 0, 3),  # nothing left: exactly what it holds
        (0, 0, 0, 0, 1),  # never 0, which CSI and the kubelet read as "no limit"
        (5, 0, 0, 0, 1),
        (0, 1, -2, -1, 1),  # a torn count never goes below what is held
    ],
)
def test_node_volume_limit(flag: int, held: int, free: int, creatable: int, expected: int) -> None:
    assert node_volume_limit(flag=flag, held=held, free=free, creatable=creatable) == expected


@pytest.mark.parametrize(
    ("devices", "bound", "ceiling", "expected"),
    [
        (8, 0, 1 << 20, (8, (1 << 20) - 8)),  # a fresh kernel: max_loop's 8 made at boot
        (10, 10, 1 << 20, (0, (1 << 20) - 10)),
        (4096, 4, 4096, (4092, 0)),  # max_part 255: 4096 devices in the minor space, all made
        (3, 5, 2, (0, 0)),  # torn reads never give a negative room
    ],
)
def test_loop_room(devices: int, bound: int, ceiling: int, expected: tuple[int, int]) -> None:
    assert loop_room(devices=devices, bound=bound, ceiling=ceiling) == expected


@pytest.mark.parametrize(
    ("max_part", "ceiling"),
    [("0", 1 << 20), ("1", 1 << 19), ("15", 1 << 16), ("255", 4096), (None, 1 << 20)],
)
def test_device_ceiling_is_the_minor_space_over_the_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_part: str | None, ceiling: int
) -> None:
    """Each device takes 1 << fls(max_part) minors of the 20 bits; max_loop plays no part."""
    params = tmp_path / "parameters"
    params.mkdir()
    (params / "max_loop").write_text("8\n")
    if max_part is not None:
        (params / "max_part").write_text(max_part + "\n")
    monkeypatch.setattr(loop_ioctl, "SYS_MODULE_LOOP", str(tmp_path))
    assert loop_ioctl.device_ceiling() == ceiling
