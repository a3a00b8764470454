"""A loop device's tuning in the kernel: read-ahead, direct I/O, and block-I/O limits in cgroups.

cgroup v1 (blkio.throttle.*_device, one "MAJ:MIN VALUE" rule per file, 0 removes it) and v2
(io.max, one "MAJ:MIN rbps=… wbps=… riops=… wiops=…" line, "max" for unlimited) are both handled.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

LOOP_SET_DIRECT_IO = 0x4C08
V1_FILES = {
    "read_bps": "blkio.throttle.read_bps_device",
    "write_bps": "blkio.throttle.write_bps_device",
    "read_iops": "blkio.throttle.read_iops_device",
    "write_iops": "blkio.throttle.write_iops_device",
}
V2_KEYS = {"read_bps": "rbps", "write_bps": "wbps", "read_iops": "riops", "write_iops": "wiops"}
# Kubelet's pod cgroups sit a few levels down (kubepods/burstable/pod<uid>, or the systemd
# driver's kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice), below the
# kubelet's --cgroup-root when it has one (kubepods under /NAME/NODE is depth 5). The walk never
# enters another pod's cgroup (only its containers are there), so the depth costs little.
POD_SEARCH_DEPTH = 8


class IoTuner(Protocol):
    def set_read_ahead(self, device: str, kib: int) -> None: ...
    def set_direct_io(self, device: str, on: bool) -> None: ...
    def pod_cgroups(self, pod_uid: str) -> list[Path]: ...
    def device_cgroup(self) -> Path: ...
    def set_limits(
        self, device: str, cgroups: Iterable[Path], limits: Mapping[str, int]
    ) -> None: ...


def _name(device: str) -> str:
    return os.path.basename(device)


def _is_pod(name: str) -> bool:
    """A pod's own cgroup: pod<uid> (cgroupfs) or kubepods-<qos>-pod<uid>.slice (systemd)."""
    return name.startswith("pod") or "-pod" in name


def _dev_numbers(device: str) -> str:
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


@dataclass
class LinuxIoTuner:
    sys_block: Path = Path("/sys/block")
    cgroup_root: Path = Path("/sys/fs/cgroup")

    def set_read_ahead(self, device: str, kib: int) -> None:
        (self.sys_block / _name(device) / "queue" / "read_ahead_kb").write_text(f"{kib}\n")

    def set_direct_io(self, device: str, on: bool) -> None:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, LOOP_SET_DIRECT_IO, 1 if on else 0)
        finally:
            os.close(fd)

    @property
    def _v1(self) -> Path | None:
        blkio = self.cgroup_root / "blkio"
        return blkio if (blkio / V1_FILES["read_bps"]).exists() else None

    def device_cgroup(self) -> Path:
        """Where a limit for the whole device goes: the root of the block-I/O hierarchy."""
        return self._v1 or self.cgroup_root

    def pod_cgroups(self, pod_uid: str) -> list[Path]:
        if not pod_uid or "/" in pod_uid:
            return []
        wanted = {f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}"}
        found: list[Path] = []
        root = self.device_cgroup()
        base_depth = len(root.parts)
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            if any(w in here.name for w in wanted) and here != root:
                found.append(here)
                dirnames.clear()
                continue
            if _is_pod(here.name) or len(here.parts) - base_depth >= POD_SEARCH_DEPTH:
                dirnames.clear()
        return found

    def set_limits(self, device: str, cgroups: Iterable[Path], limits: Mapping[str, int]) -> None:
        numbers = _dev_numbers(device)
        for cgroup in cgroups:
            if self._v1 is not None:
                for name, file in V1_FILES.items():
                    (cgroup / file).write_text(f"{numbers} {limits.get(name, 0)}\n")
            else:
                parts = [f"{key}={limits.get(name, 0) or 'max'}" for name, key in V2_KEYS.items()]
                (cgroup / "io.max").write_text(f"{numbers} {' '.join(parts)}\n")


@dataclass
class FakeIoTuner:
    """Records what the driver asked of the kernel, for fast tests without root."""

    read_ahead: dict[str, int] = field(default_factory=dict)
    direct_io: dict[str, bool] = field(default_factory=dict)
    limits: dict[tuple[str, Path], dict[str, int]] = field(default_factory=dict)
    pods: dict[str, list[Path]] = field(default_factory=dict)

    def set_read_ahead(self, device: str, kib: int) -> None:
        self.read_ahead[device] = kib

    def set_direct_io(self, device: str, on: bool) -> None:
        self.direct_io[device] = on

    def pod_cgroups(self, pod_uid: str) -> list[Path]:
        return list(self.pods.get(pod_uid, []))

    def device_cgroup(self) -> Path:
        return Path("/fake-cgroup-root")

    def set_limits(self, device: str, cgroups: Iterable[Path], limits: Mapping[str, int]) -> None:
        for cgroup in cgroups:
            self.limits[(device, cgroup)] = dict(limits)
