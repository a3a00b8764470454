"""`make run`'s directory (RUN_DIR, ./.run): the socket, the driver's state and pool, and the
volume command's records. Every local volume and snapshot lives in it, so removing it removes
them: `make clean` leaves it alone, and `make clean-volumes` removes it only when nothing in it is
mounted or attached, after naming what is lost (holding no volume, it has nothing to clean).
`make run` reports, as it stops, what is still mounted.

Standard library only: `make clean-volumes` runs this after `make clean` has taken the venv."""

from __future__ import annotations

import argparse
import errno
import fcntl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from csi_hostpath.core.sizes import format_bytes
from csi_hostpath.store.backing.file_identity import read_identity
from csi_hostpath.system import runner
from csi_hostpath.system.system_errors import CommandError
from csi_hostpath.volume_cli.exit_codes import BUSY
from csi_hostpath.volume_cli.kernel import loops_backed_below, mount_source, mounts_below
from csi_hostpath.volume_cli.records import Records, RecordsError, RecordsFile


@dataclass(frozen=True)
class Item:
    kind: str  # "volume" or "snapshot"
    name: str
    item_id: str
    size_bytes: int
    allocated_bytes: int


def _records(run_dir: Path) -> Records:
    try:
        return RecordsFile(run_dir / "volume-cli").read()
    except RecordsError:
        return Records()  # names only: the pool's own identities still name every file


def inventory(run_dir: Path) -> list[Item]:
    """Every volume and snapshot in the pool, named as the volume command or the driver named
    it. The backing files' own identities are read, not the database: the pool is the truth."""
    records = _records(run_dir)
    names = {v.volume_id: v.name for v in records.volumes.values()}
    names |= {s.snapshot_id: s.name for s in records.snapshots.values()}
    pool = run_dir / "state" / "pool"
    items = []
    for kind, folder in (("volume", "volumes"), ("snapshot", "snapshots")):
        directory = pool / folder
        files = sorted(directory.glob("*.img")) if directory.is_dir() else []
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            body = read_identity(path) or {}
            name = names.get(path.stem) or str(body.get("name") or "(unnamed)")
            items.append(Item(kind, name, path.stem, st.st_size, st.st_blocks * 512))
    return items


def state_dir_held(state_dir: Path) -> bool:
    """Does a driver hold the state directory's lock (server.lock_state_dir), i.e. run on it?"""
    try:
        handle = open(state_dir / ".lock", "rb")  # noqa: SIM115 - closed below
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return True
            raise
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def lock_holder(state_dir: Path) -> int | None:
    """The PID holding the state directory's lock, from /proc/locks (None: none, or unknown)."""
    try:
        inode = (state_dir / ".lock").stat().st_ino
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in locks.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF" ("->" marks a waiter: skip it)
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def report_running(run_dir: Path, out: TextIO) -> int:
    """What a second `make run` says before it starts anything: that a driver already runs on
    RUN_DIR, and where (1); 0 when none does."""
    state = run_dir / "state"
    if not state_dir_held(state):
        return 0
    pid = lock_holder(state)
    who = f"pid {pid}, " if pid else ""
    stop = f"Ctrl-C in its shell, or kill {pid}" if pid else "Ctrl-C in its shell"
    out.write(
        f"csi-hostpath: a driver is already running on {run_dir} ({who}socket "
        f"{run_dir / 'csi.sock'}); use it from another shell (`csi-hostpath volume list` finds "
        f"it from this checkout), or stop it first ({stop})\n"
    )
    return 1


def in_use(run_dir: Path) -> list[str]:
    """What stops a removal: a driver running on the state, mounts below RUN_DIR, loop devices
    whose backing file is below it. Removing files under any of them destroys data in use."""
    root = str(run_dir)
    found = []
    if state_dir_held(run_dir / "state"):
        found.append(f"a driver is running on {run_dir / 'state'} (`make run`)")
    found += [f"mounted: volume {name} at {path}" for name, path in still_mounted(run_dir)]
    found += [f"mounted: {point} ({source})" for point, source in mounts_below(root)]
    found += [f"attached: {dev} -> {backing}" for dev, backing in loops_backed_below(root)]
    return found


def still_mounted(run_dir: Path) -> list[tuple[str, str]]:
    """(volume name, path) of each mount the volume command made that is still in place."""
    records = _records(run_dir)
    return [
        (vol.name, m.path)
        for vol in sorted(records.volumes.values(), key=lambda v: v.name)
        for m in vol.mounts
        if mount_source(m.path) is not None
    ]


def report_mounted(run_dir: Path, out: TextIO) -> int:
    """What `make run` says as it stops: which volumes stay mounted, and how to unmount them."""
    left = still_mounted(run_dir)
    if not left:
        return 0
    count = f"{len(left)} volume{'s are' if len(left) > 1 else ' is'}"
    lines = [f"csi-hostpath: the driver stopped; {count} still mounted (the data stays in place):"]
    lines += [f"  {name} at {path}" for name, path in left]
    lines.append("to unmount: start the driver again (`make run`), then")
    lines += [f"  csi-hostpath volume unmount {path}" for _, path in left]
    out.write("\n".join(lines) + "\n")
    return 0


def _describe(run_dir: Path, items: list[Item]) -> str:
    volumes = sum(1 for i in items if i.kind == "volume")
    snapshots = len(items) - volumes
    lines = [
        f"{run_dir} holds {volumes} volume(s) and {snapshots} snapshot(s); removing it loses "
        "them, the driver's state (its database: ledger, audit trail) and the volume command's "
        "records:"
    ]
    lines += [
        f"  {i.kind} {i.name}, {format_bytes(i.size_bytes)} "
        f"({format_bytes(i.allocated_bytes)} on disk): {i.item_id}"
        for i in items
    ]
    return "\n".join(lines)


def remove(
    run_dir: Path, yes: bool, out: TextIO, err: TextIO, ask: Callable[[str], str] | None
) -> int:
    """Remove RUN_DIR and every volume in it, unless something in it is in use; with no volume
    and no snapshot in it, there is nothing to clean. `ask` puts the question to a person (None:
    nobody to ask, so only `yes` removes)."""
    if not run_dir.exists():
        out.write(f"nothing to remove: {run_dir} does not exist\n")
        return 0
    items = inventory(run_dir)
    if not items:
        # No volume to lose, nor to clean: the driver's state alone, which `make run` reuses.
        out.write(
            f"nothing to clean: {run_dir} holds no volume and no snapshot; it stays as it is\n"
        )
        return 0
    busy = in_use(run_dir)
    if busy:
        err.write(
            f"csi-hostpath: not removing {run_dir}: it is in use, and removing files in use "
            "destroys the data in them:\n"
            + "".join(f"  {line}\n" for line in busy)
            + "next: with the driver running (`make run`), unmount each volume "
            "(`csi-hostpath volume list` shows where: `csi-hostpath volume unmount PATH`), "
            "stop the driver, then run this again\n"
        )
        return BUSY
    out.write(_describe(run_dir, items) + "\n")
    if not yes:
        if ask is None:
            err.write(
                "nothing removed: nobody to ask. Run `make clean-volumes YES=1` (or pass --yes) "
                "to remove it\n"
            )
            return 1
        if ask("remove all of it? type yes: ").strip() != "yes":
            out.write(f"nothing removed; {run_dir} is as it was\n")
            return 1
    # Checked above, and still: rm never crosses into a filesystem mounted since.
    try:
        runner.run(["rm", "-r", "--one-file-system", "--", str(run_dir)], timeout=3600)
    except CommandError as e:
        err.write(e.stderr)
        err.write(f"csi-hostpath: {run_dir} was not removed completely (see above)\n")
        return 1
    out.write(f"removed {run_dir}\n")
    return 0


def add_run_dir_parser(sub: Any, run_dir_help: str) -> None:
    parser = sub.add_parser(
        "run-dir", help="`make run`'s directory: what is still mounted; remove it and its volumes"
    )
    rsub = parser.add_subparsers(dest="run_dir_command", required=True)
    mounted = rsub.add_parser("mounted", help="the volumes still mounted, and how to unmount them")
    rm = rsub.add_parser(
        "remove", help="remove RUN_DIR with every local volume in it (refused while in use)"
    )
    rm.add_argument("--yes", action="store_true", help="don't ask (the list is printed still)")
    running = rsub.add_parser(
        "running", help="exit 1, saying where, if a driver already runs on RUN_DIR"
    )
    for p in (mounted, rm, running):
        p.add_argument("--run-dir", default=None, help=run_dir_help)


def run(args: argparse.Namespace, run_dir: Path) -> int:
    if args.run_dir_command == "mounted":
        return report_mounted(run_dir, sys.stdout)
    if args.run_dir_command == "running":
        return report_running(run_dir, sys.stderr)
    ask = input if sys.stdin.isatty() else None
    return remove(run_dir, args.yes, sys.stdout, sys.stderr, ask)
