"""Doctor checks of the pool directory: writable, space, reflink, quarantine, owner."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from pathlib import Path

from csi_hostpath.core.sizes import format_bytes
from csi_hostpath.doctor.finding import (
    Finding,
    describe_fs,
    nearest_existing,
    writable_dir,
)
from csi_hostpath.store.backing.adopt_pool import quarantine_dir, quarantined_files, strays
from csi_hostpath.store.backing.owner import read_owner, rebuild_command
from csi_hostpath.store.connection import peek_database_id
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.system.linux import FICLONE
from csi_hostpath.system.linux.fs import statvfs_stats

LOW_SPACE_BYTES = 1 << 30
# FICLONE's answers when the filesystem (or the pair of files) cannot share extents.
_NO_REFLINK_ERRNOS = (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV)


def check_pool(pool_dir: Path) -> list[Finding]:
    # A missing pool is measured where `serve` would create it: its nearest existing parent.
    probe = nearest_existing(pool_dir)
    fs = describe_fs(probe)
    findings = [_check_pool_dir(pool_dir, probe, fs)]
    room = statvfs_stats(str(probe))
    free, total = room.available_bytes, room.total_bytes
    where = "" if probe == pool_dir.absolute() else f" (measured at {probe})"
    space = f"{format_bytes(free)} free of {format_bytes(total)}{where}"
    if free < LOW_SPACE_BYTES:
        findings.append(
            Finding(
                "pool-space",
                "warn",
                f"only {space}",
                "free space there or pass a --pool-dir on a bigger filesystem: volumes are thin, "
                "so writes inside them fail with ENOSPC once the pool fills",
            )
        )
    else:
        findings.append(Finding("pool-space", "ok", space))
    findings.append(_check_reflink(probe, fs))
    findings.append(check_quarantine(pool_dir))
    findings.append(check_strays(pool_dir))
    return findings


def check_strays(pool_dir: Path) -> Finding:
    """Files in volumes/ or snapshots/ named like no volume or snapshot: the controller neither
    adopts nor quarantines them, so nothing else would ever say they are there."""
    found = strays(PoolLayout(pool_dir))
    if not found:
        return Finding("pool-strays", "ok", "every file in volumes/ and snapshots/ is the driver's")
    names = ", ".join(f"{p.parent.name}/{p.name}" for p in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return Finding(
        "pool-strays",
        "warn",
        f"{len(found)} file(s) in {pool_dir} that are no volume or snapshot: {names}{more}",
        "the driver only knows volumes/vol-<32 hex digits>.img and snapshots/snap-<id>.img, and "
        "neither uses nor deletes anything else. A volume's file renamed by hand: rename it back "
        "and restart the controller, which adopts it; someone's data: copy it out (losetup -r, "
        "mount -o ro) and move it elsewhere; garbage: delete it by hand",
    )


def check_quarantine(pool_dir: Path) -> Finding:
    """Files the controller moved aside at start because nothing said whose they were."""
    layout = PoolLayout(pool_dir)
    files = quarantined_files(layout)
    if not files:
        return Finding("pool-quarantine", "ok", "no quarantined files")
    whys = []
    for path in files[:3]:
        try:
            why = json.loads(path.with_name(path.name + ".why.json").read_bytes())["why"]
        except (OSError, ValueError, KeyError, TypeError):
            why = "no .why.json"
        whys.append(f"{path.name} ({why})")
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    return Finding(
        "pool-quarantine",
        "warn",
        f"{len(files)} file(s) in {quarantine_dir(layout)}: " + "; ".join(whys) + more,
        "no record and no identity claimed them, so the controller kept them aside instead of "
        "deleting them. Each .why.json says where it was. If a file is a volume's data, copy the "
        "data out of it (losetup -r; mount -o ro); if it is another pool's, move it back there; "
        "if it is garbage, delete it and its .why.json by hand",
    )


def check_owner(pool_dir: Path, state_dir: Path) -> Finding:
    """Which database owns the pool (POOL/.owner), and whether this state directory's
    controller would be refused for it (store/backing/owner.py): a mistyped --state-dir, or a
    second database on one pool."""
    marker = pool_dir / ".owner"
    try:
        readable = not marker.exists() or os.access(marker, os.R_OK)
    except PermissionError:
        readable = False
    if not readable:
        # Not an unreadable marker: this user may not read root's pool. Taking the pool over
        # would be the wrong answer to a healthy one.
        return Finding(
            "pool-owner",
            "warn",
            f"permission denied: {marker} (the pool's owner) is root's, and doctor runs as "
            f"uid {os.geteuid()}",
            "run doctor as root (e.g. with sudo) to see which database owns the pool",
        )
    owner = read_owner(PoolLayout(pool_dir))
    if owner is None:
        return Finding("pool-owner", "ok", "no controller has claimed the pool yet")
    theirs, where = str(owner.get("db_id")), str(owner.get("state_dir"))
    if owner.get("unreadable"):
        return Finding(
            "pool-owner",
            "warn",
            f"{pool_dir / '.owner'} is unreadable",
            "a controller refuses the pool until it can tell whose it is; if this state directory "
            f"is the pool's, take it over: `{rebuild_command(state_dir, pool_dir)}`",
        )
    if where == str(state_dir.absolute()) or Path(where).resolve() == state_dir.resolve():
        return Finding("pool-owner", "ok", f"owned by this state directory (database {theirs})")
    mine = peek_database_id(state_dir / "state.db")
    if mine is None or mine == theirs:
        return Finding(
            "pool-owner",
            "ok",
            f"owned by the database in {where} (id {theirs}); node plugins don't claim the pool, "
            f"but a controller started with --state-dir {state_dir} would be refused",
        )
    return Finding(
        "pool-owner",
        "warn",
        f"pool {pool_dir} belongs to the database in {where} (id {theirs}), not to this one "
        f"(id {mine}): a controller started with --state-dir {state_dir} refuses to serve it",
        f"if --state-dir is a typo, use {where}; if that database is gone for good, take the pool "
        f"over: `{rebuild_command(state_dir, pool_dir)}` (it rebuilds from the pool's files; "
        "nothing is deleted)",
    )


def _check_pool_dir(pool_dir: Path, probe: Path, fs: str) -> Finding:
    if probe == pool_dir.absolute():
        if not writable_dir(pool_dir):
            return Finding(
                "pool-dir",
                "fail",
                f"{pool_dir} is not a writable directory ({fs})",
                f"make {pool_dir} a directory writable by root (mount it read-write), or pass "
                "another --pool-dir; the volumes' backing files live there",
            )
        return Finding("pool-dir", "ok", f"{pool_dir} is writable ({fs})")
    if not writable_dir(probe):
        return Finding(
            "pool-dir",
            "fail",
            f"{pool_dir} does not exist and can't be created: {probe} is not writable",
            f"create it (`mkdir -p {pool_dir}`) or pass a writable --pool-dir",
        )
    return Finding(
        "pool-dir",
        "warn",
        f"{pool_dir} does not exist; it will be created when `serve` starts ({fs})",
        "nothing to do on a new node; in shared scope, mount the shared filesystem there first",
    )


def _check_reflink(directory: Path, fs: str) -> Finding:
    if not writable_dir(directory):
        return Finding(
            "pool-reflink",
            "warn",
            f"not tested: {directory} is not writable",
            "fix pool-dir first (above)",
        )
    made: list[tuple[int, str]] = []
    try:
        made.append(tempfile.mkstemp(prefix=".csihp-doctor-", dir=directory))
        made.append(tempfile.mkstemp(prefix=".csihp-doctor-", dir=directory))
        (src_fd, _), (dst_fd, _) = made
        # One block of real data: a reflink of an empty file would prove nothing.
        os.write(src_fd, b"csi-hostpath doctor\n" * 205)
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _NO_REFLINK_ERRNOS:
            detail = f"reflink: no (snapshots copy data extents; still sparse) on {fs}"
            return Finding("pool-reflink", "ok", detail)
        return Finding(
            "pool-reflink",
            "warn",
            f"reflink could not be tested in {directory}: {exc.strerror}",
            "check that the pool filesystem has free space and accepts writes",
        )
    finally:
        for fd, name in made:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
    return Finding("pool-reflink", "ok", f"reflink: yes (snapshots are instant) on {fs}")
