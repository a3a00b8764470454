"""What only the real system layer does: loop ioctl fallbacks, races, reading mounts.

Behaviour of the real implementation that the fake has no counterpart for: the loop ioctl
fallbacks, races with other processes, and reading mounts (the parser alone, on text, is
tests/unit/test_mountinfo_parse.py)."""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from csi_hostpath.system.linux import (
    LO_FLAGS_DIRECT_IO,
    LOOP_CONFIGURE,
    LinuxFs,
    LinuxLoop,
    LinuxMounts,
    loop_ioctl,
    mountinfo,
    read_mountinfo,
    topmost,
)
from csi_hostpath.system.linux import statmount as linux_statmount

from .conftest import real_unavailable

MiB = 1 << 20


@pytest.fixture
def real_loop(work_dir: Path) -> LinuxLoop:
    reason = real_unavailable()
    if reason is not None:
        pytest.skip(reason)
    return LinuxLoop()


def _sparse(work_dir: Path, name: str, size: int = 8 * MiB) -> Path:
    path = work_dir / name
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def _configure_flags(buffer: object) -> int:
    # lo_flags sits after fd, block_size, five u64 and three u32 of struct loop_config.
    assert isinstance(buffer, bytes)
    (flags,) = struct.unpack_from("=I", buffer, 8 + 5 * 8 + 3 * 4)
    assert isinstance(flags, int)
    return flags


def _wrap_ioctl(monkeypatch: pytest.MonkeyPatch, hook: Callable[[int, int, object], None]) -> None:
    original = fcntl.ioctl

    def wrapped(fd: int, request: int, arg: Any = 0, mutate: bool = True) -> Any:
        hook(fd, request, arg)
        return original(fd, request, arg, mutate)

    # loop_ioctl.py looks fcntl.ioctl up at each call, so patching the module reaches it.
    monkeypatch.setattr(fcntl, "ioctl", wrapped)


def test_attach_uses_direct_io(real_loop: LinuxLoop, work_dir: Path, tag_prefix: str) -> None:
    device = real_loop.attach(_sparse(work_dir, "vol"), tag_prefix + "vol")
    name = os.path.basename(device.path)
    assert Path(f"/sys/block/{name}/loop/dio").read_text().strip() == "1"


def test_attach_falls_back_to_buffered_io(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse_direct_io(fd: int, request: int, arg: object) -> None:
        if request == LOOP_CONFIGURE and _configure_flags(arg) & LO_FLAGS_DIRECT_IO:
            raise OSError(errno.EINVAL, "direct IO refused (simulated)")

    _wrap_ioctl(monkeypatch, refuse_direct_io)
    device = real_loop.attach(_sparse(work_dir, "vol"), tag_prefix + "vol")
    name = os.path.basename(device.path)
    assert Path(f"/sys/block/{name}/loop/dio").read_text().strip() == "0"
    assert real_loop.find(tag_prefix + "vol") == device


def test_attach_retries_when_the_free_device_was_taken(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = [3]

    def taken(fd: int, request: int, arg: object) -> None:
        if request == LOOP_CONFIGURE and busy[0]:
            busy[0] -= 1
            raise OSError(errno.EBUSY, "taken (simulated)")

    _wrap_ioctl(monkeypatch, taken)
    device = real_loop.attach(_sparse(work_dir, "vol"), tag_prefix + "vol")
    assert busy == [0]
    assert real_loop.find(tag_prefix + "vol") == device


def _count_loop_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gains an entry each time the loop driver scans every loop device."""
    scans: list[int] = []
    original = loop_ioctl.configured_loop_indices

    def counted() -> list[int]:
        scans.append(1)
        return original()

    monkeypatch.setattr(loop_ioctl, "configured_loop_indices", counted)
    return scans


def test_find_and_attach_scan_no_loop_devices(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every NodeStage used to scan every loop device on the host twice (a miss in
    # find, then again in attach under the process-wide lock), so its cost grew with what the
    # neighbours held. After the start's one scan, a find or an attach asks only its own device.
    first = real_loop.attach(_sparse(work_dir, "first"), tag_prefix + "first")
    real_loop.list(tag_prefix)  # the start's scan
    scans = _count_loop_scans(monkeypatch)
    assert real_loop.find(tag_prefix + "missing") is None
    second = real_loop.attach(_sparse(work_dir, "second"), tag_prefix + "second")
    assert real_loop.find(tag_prefix + "second") == second
    assert real_loop.find(tag_prefix + "first") == first
    real_loop.detach(second)
    assert real_loop.find(tag_prefix + "second") is None
    assert scans == []


def test_the_start_scans_loop_devices_once(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reconcile's list() is the start's one scan; the index takes it instead of scanning again.
    scans = _count_loop_scans(monkeypatch)
    real_loop.list(tag_prefix)
    assert real_loop.find(tag_prefix + "missing") is None
    device = real_loop.attach(_sparse(work_dir, "vol"), tag_prefix + "vol")
    assert real_loop.find(tag_prefix + "vol") == device
    assert len(scans) == 1


def test_find_asks_the_kernel_for_one_mount(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # find read and split all of /proc/self/mountinfo for every lookup, so a node
    # call's cost grew with the mounts on the node. Now statx + statmount answer for one mount,
    # and must give exactly what the mountinfo line gives, for every kind of mount the driver
    # makes: a filesystem with per-mount flags, a read-only bind, a block device bound on a file,
    # a stacked mount, and a path the kernel escapes in mountinfo.
    mounts, fs = LinuxMounts(), LinuxFs()
    device = real_loop.attach(_sparse(work_dir, "vol", 64 * MiB), tag_prefix + "vol")
    fs.mkfs(device.path, "ext4")
    staging = work_dir / "staging dir\\x"
    bound, node, stacked = work_dir / "bound", work_dir / "dev", work_dir / "stacked"
    for directory in (staging, bound, stacked):
        directory.mkdir()
    node.touch()
    mounts.mount(device.path, str(staging), "ext4", ["nosuid", "nodev", "noexec", "noatime"])
    mounts.bind(str(staging), str(bound), read_only=True)
    mounts.bind(device.path, str(node), read_only=False)
    mounts.bind(str(staging), str(stacked), read_only=False)
    mounts.bind(str(bound), str(stacked), read_only=True)
    points = [str(p) for p in (staging, bound, node, stacked)]
    records = read_mountinfo()
    for point in points:
        expected = topmost(records, point)
        assert expected is not None
        assert linux_statmount.find(point) == expected
    assert linux_statmount.find(str(work_dir)) is None
    assert linux_statmount.find(str(work_dir / "missing")) is None

    def no_mountinfo(*args: object) -> None:
        raise AssertionError("find read /proc/self/mountinfo")

    monkeypatch.setattr(mountinfo, "read_mountinfo_at", no_mountinfo)
    monkeypatch.setattr(mountinfo, "read_mountinfo", no_mountinfo)
    assert [mounts.find(point) for point in points] == [topmost(records, p) for p in points]
    assert mounts.find(str(work_dir)) is None


def test_without_statmount_an_rpc_reads_mountinfo_once(
    real_loop: LinuxLoop, work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the kernel has no statmount (Linux < 6.8), every lookup of an RPC shares
    # one parse of /proc/self/mountinfo, and a mount or unmount through LinuxMounts drops it.
    def unsupported(path: str) -> None:
        raise linux_statmount.StatmountUnsupported("no statmount (simulated)")

    monkeypatch.setattr(linux_statmount, "find", unsupported)
    reads: list[int] = []
    original = mountinfo.read_mountinfo

    def counted() -> list[mountinfo.MountRecord]:
        reads.append(1)
        return original()

    monkeypatch.setattr(mountinfo, "read_mountinfo", counted)
    mounts = LinuxMounts()
    source, target, other = work_dir / "src", work_dir / "target", work_dir / "other"
    for directory in (source, target, other):
        directory.mkdir()
    with mounts.shared_lookups():
        assert mounts.find(str(target)) is None
        assert mounts.find(str(other)) is None
        assert len(reads) == 1
        mounts.bind(str(source), str(target), read_only=False)
        found = mounts.find(str(target))
        assert found is not None and found.mount_point == str(target)
        assert mounts.find(str(other)) is None
        assert len(reads) == 2
        mounts.unmount(str(target))
        assert mounts.find(str(target)) is None
    assert len(reads) == 3


WORKERS = 4
DEVICES_EACH = 3
_ATTACH_SCRIPT = """
import sys
from pathlib import Path
from csi_hostpath.system.linux import LinuxLoop
loop = LinuxLoop()
for path, tag in zip(sys.argv[1::2], sys.argv[2::2]):
    print(loop.attach(Path(path), tag).path)
"""


def test_processes_racing_for_free_devices(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str
) -> None:
    # Separate processes don't share the attach lock: they collide in LOOP_CONFIGURE (EBUSY) and
    # must each end up on a device of their own.
    procs = []
    for worker in range(WORKERS):
        argv: list[str] = []
        for i in range(DEVICES_EACH):
            name = f"w{worker}-{i}"
            argv += [str(_sparse(work_dir, name)), tag_prefix + name]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _ATTACH_SCRIPT, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        )
    paths: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        paths += out.split()
    assert len(paths) == len(set(paths)) == WORKERS * DEVICES_EACH
    assert sorted(d.path for d in real_loop.list(tag_prefix)) == sorted(paths)


def _write_dos_partition_table(path: Path, size: int) -> None:
    # One Linux partition from sector 2048 to the end; the layout of a classic MBR.
    entry = struct.pack("<B3sB3sII", 0, b"\0\0\0", 0x83, b"\0\0\0", 2048, size // 512 - 2048)
    with open(path, "r+b") as handle:
        handle.seek(446)
        handle.write(entry)
        handle.seek(510)
        handle.write(b"\x55\xaa")


def test_probe_reports_a_partition_table_as_not_blank(
    real_loop: LinuxLoop, work_dir: Path, tag_prefix: str
) -> None:
    # A block volume's user may have partitioned it; "no filesystem" must not read as "blank".
    backing = _sparse(work_dir, "vol")
    _write_dos_partition_table(backing, 8 * MiB)
    device = real_loop.attach(backing, tag_prefix + "vol")
    assert LinuxFs().probe(device.path) == "partition-table:dos"
