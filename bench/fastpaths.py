"""The system layer's fast paths against the tools they replace, on real devices.

LinuxMounts calls mount(2)/umount2(2) directly and LinuxFs.probe skips blkid for a device that
provably reads as zeros. Each case here does one thing twice, once with the tool (mount(8),
umount(8), blkid) and once through the system layer, and compares what the kernel then shows:
the mountinfo line (filesystem, source, root, per-mount and superblock options) or the probe's
answer. It also records whether the system layer really took its fast path (no tool spawned).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import mounts_under
from csi_hostpath.system.linux import (
    LinuxFs,
    LinuxLoop,
    LinuxMounts,
    escape_mountinfo,
    linux_mounts,
)
from csi_hostpath.system.linux import fs as linux_fs

MiB = 1 << 20


def _tool(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, check=True, timeout=60)


def _line(point: str) -> tuple[str, ...] | None:
    """(root, per-mount options, fs type, source, superblock options) of the topmost mount at
    point, straight from /proc/self/mountinfo; None if nothing is mounted there."""
    wanted = escape_mountinfo(point)
    found = None
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        for text in handle:
            fields = text.split()
            if len(fields) > 4 and fields[4] == wanted:
                tail = fields[fields.index("-", 6) + 1 :]
                found = (fields[3], fields[5], *tail)
    return found


@contextlib.contextmanager
def _count_tools() -> Iterator[list[list[str]]]:
    """Record every tool the system layer spawns while the block runs."""
    spawned: list[list[str]] = []
    # The layer's modules that spawn tools call run() through their module globals.
    namespaces = [vars(linux_mounts), vars(linux_fs)]
    real_run: Callable[..., str] = namespaces[0]["run"]

    def recording(argv: Sequence[str], **kw: Any) -> str:
        spawned.append([str(a) for a in argv])
        return real_run(argv, **kw)

    for namespace in namespaces:
        namespace["run"] = recording
    try:
        yield spawned
    finally:
        for namespace in namespaces:
            namespace["run"] = real_run


@dataclass
class Case:
    name: str
    same: bool
    fast: bool
    tool_result: str
    layer_result: str


def _compare(
    name: str,
    by_tool: Callable[[], object],
    by_layer: Callable[[], object],
    observe: Callable[[], object],
    undo: Callable[[], None],
) -> Case:
    try:
        by_tool()
        expected = observe()
    finally:
        undo()
    with _count_tools() as spawned:
        try:
            by_layer()
            got = observe()
        finally:
            undo()
    return Case(name, expected == got, not spawned, repr(expected), repr(got))


def _mount_cases(work: Path, ext4: str, xfs: str) -> list[Case]:
    mounts = LinuxMounts()
    point = str(work / "mnt")
    os.makedirs(point, exist_ok=True)

    def undo() -> None:
        while _line(point) is not None:
            _tool(["umount", point])

    cases = []
    for device, fs_type, options in (
        (ext4, "ext4", []),
        (ext4, "ext4", ["ro"]),
        (ext4, "ext4", ["noatime", "nosuid"]),
        (ext4, "ext4", ["nodev,noexec", "sync", "nodiratime"]),
        (ext4, "ext4", ["ro", "rw", "lazytime"]),
        (ext4, "ext4", ["discard", "noatime"]),
        (ext4, "ext4", ["data=ordered"]),  # not in the fast path's table: mount(8) does it
        (xfs, "xfs", []),
        (xfs, "xfs", ["nouuid"]),
        (xfs, "xfs", ["ro", "relatime", "nouuid,discard"]),
    ):
        opts = ["-o", ",".join(options)] if options else []
        cases.append(
            _compare(
                f"mount -t {fs_type} {' '.join(opts) or '(no options)'}",
                functools.partial(_tool, ["mount", "-t", fs_type, *opts, device, point]),
                functools.partial(mounts.mount, device, point, fs_type, options),
                lambda: _line(point),
                undo,
            )
        )
    return cases


def _bind_cases(work: Path, ext4: str, loop_device: str) -> list[Case]:
    mounts = LinuxMounts()
    staging = str(work / "staging")
    target = str(work / "target")
    block_target = str(work / "block-target")
    os.makedirs(staging, exist_ok=True)
    os.makedirs(target, exist_ok=True)
    Path(block_target).touch()
    _tool(["mount", "-t", "ext4", "-o", "nosuid,nodev,noatime", ext4, staging])

    def undo_at(point: str) -> Callable[[], None]:
        def undo() -> None:
            while _line(point) is not None:
                _tool(["umount", point])

        return undo

    def bind_ro_by_tool() -> None:
        _tool(["mount", "--bind", staging, target])
        _tool(["mount", "-o", "remount,bind,ro", target])

    try:
        return [
            _compare(
                "mount --bind (from a nosuid,nodev,noatime mount)",
                lambda: _tool(["mount", "--bind", staging, target]),
                lambda: mounts.bind(staging, target, read_only=False),
                lambda: _line(target),
                undo_at(target),
            ),
            _compare(
                "mount --bind + mount -o remount,bind,ro",
                bind_ro_by_tool,
                lambda: mounts.bind(staging, target, read_only=True),
                lambda: _line(target),
                undo_at(target),
            ),
            _compare(
                "mount --bind of a block device node onto a file",
                lambda: _tool(["mount", "--bind", loop_device, block_target]),
                lambda: mounts.bind(loop_device, block_target, read_only=False),
                lambda: _line(block_target),
                undo_at(block_target),
            ),
            _compare(
                "umount of a bind mount",
                functools.partial(_bind_then, staging, target, ["umount", target]),
                functools.partial(_bind_then, staging, target, lambda: mounts.unmount(target)),
                lambda: _line(target),
                undo_at(target),
            ),
            _compare(
                "umount -l of a busy mount",
                lambda: _lazy_busy(staging, target, lambda: _tool(["umount", "-l", target])),
                lambda: _lazy_busy(staging, target, lambda: mounts.unmount(target, lazy=True)),
                lambda: _line(target),
                undo_at(target),
            ),
        ]
    finally:
        undo_at(staging)()


def _bind_then(staging: str, target: str, then: list[str] | Callable[[], None]) -> None:
    _tool(["mount", "--bind", staging, target])
    if isinstance(then, list):
        _tool(then)
    else:
        then()


def _lazy_busy(staging: str, target: str, unmount: Callable[[], object]) -> None:
    _tool(["mount", "--bind", staging, target])
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)  # keeps the mount busy
    try:
        unmount()
    finally:
        os.close(fd)


def _blkid(device: str) -> str | None:
    done = subprocess.run(
        ["blkid", "-p", "-o", "export", device], capture_output=True, text=True, check=False
    )
    if done.returncode == 2:
        return None
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if "TYPE" in values:
        return values["TYPE"]
    return f"partition-table:{values['PTTYPE']}" if "PTTYPE" in values else None


def _probe_cases(blank: str, ext4: str) -> list[Case]:
    fs = LinuxFs()
    cases = []
    for name, device in (("probe of a fresh sparse volume", blank), ("probe of ext4", ext4)):
        expected = _blkid(device)
        with _count_tools() as spawned:
            got = fs.probe(device)
        cases.append(Case(name, expected == got, not spawned, repr(expected), repr(got)))
    # Written through the device's page cache and not yet flushed: blkid sees it, so must probe.
    fd = os.open(blank, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\x55\xaa", 510)  # the DOS partition table signature
        os.pwrite(fd, bytes([0, 0, 0, 0, 0x83, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0]), 446)
    finally:
        os.close(fd)
    with _count_tools() as spawned:
        got = fs.probe(blank)
    expected = _blkid(blank)
    # Here the fast path must step aside (a tool ran) and the answers agree.
    name = "probe right after a buffered write (must fall back to blkid)"
    cases.append(Case(name, expected == got and bool(spawned), False, repr(expected), repr(got)))
    return cases


def check(work: Path, tag_prefix: str) -> list[Case]:
    """Every case, on three fresh loop devices below work; all cleaned up afterwards."""
    work.mkdir(parents=True, exist_ok=True)
    loop = LinuxLoop()
    devices = []
    try:
        for name, size in (("ext4", 64 * MiB), ("xfs", 320 * MiB), ("blank", 64 * MiB)):
            backing = work / f"{name}.img"
            with open(backing, "wb") as handle:
                handle.truncate(size)
            devices.append(loop.attach(backing, f"{tag_prefix}fastpath-{name}"))
        ext4, xfs, blank = (device.path for device in devices)
        _tool(["mkfs.ext4", "-F", "-q", ext4])
        _tool(["mkfs.xfs", "-f", "-q", xfs])
        return (
            _mount_cases(work, ext4, xfs)
            + _bind_cases(work, ext4, blank)
            + _probe_cases(blank, ext4)
        )
    finally:
        for device in devices:
            loop.detach(device)
        if not mounts_under(work):  # never recurse into a mount that failed to come off
            shutil.rmtree(work, ignore_errors=True)
