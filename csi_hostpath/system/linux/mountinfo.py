"""The mount table as the kernel shows it: /proc/self/mountinfo parsed, and one mount found at a
path (statx + statmount(2), two syscalls; mountinfo where the kernel can't name a single mount:
no statmount(2), Linux < 6.8, or no sb_source, < 6.11).

Without statmount, an RPC's lookups share one read of mountinfo: the call pipeline
(api/runtime/pipeline.py) runs each RPC inside the system's Mounts.shared_lookups(), which opens
a scope of the LinuxMounts' own SharedLookups below, and find_mount is handed that object.
LinuxMounts' lookups parse mountinfo once inside it and answer every later one from that parse,
until a mount, bind or unmount made through LinuxMounts drops it. Outside a scope (reconcile at
start, tools) each lookup reads mountinfo for itself. With statmount nothing of the scope is
used."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.linux import statmount
from csi_hostpath.system.linux._log import log


@dataclass
class ParsedMountinfo:
    """One RPC's parse of mountinfo, shared by its lookups until the mount table changes."""

    records: list[Any] | None = None  # MountRecord; None until the first lookup


class SharedLookups:
    """The scopes in which one owner's lookups share a parse (the system's LinuxMounts holds one):
    a scope is this thread's (a context variable of this object's own), so two RPCs on two
    threads never share one, and a scope of one owner is not another's."""

    def __init__(self) -> None:
        # One per LinuxMounts, which lives as long as the process.
        self._current: ContextVar[ParsedMountinfo | None] = ContextVar(
            "csi_hostpath_mountinfo", default=None
        )

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        token = self._current.set(ParsedMountinfo())
        try:
            yield
        finally:
            self._current.reset(token)

    def current(self) -> ParsedMountinfo | None:
        return self._current.get()

    def changed(self) -> None:
        """The mount table changed under this RPC: the next lookup parses mountinfo again."""
        parsed = self._current.get()
        if parsed is not None:
            parsed.records = None


# --- parsing and lookups --------------------------------------------------------------------------

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
MOUNTINFO = "/proc/self/mountinfo"
# id, parent, major:minor, root, mount point, options, "-", type, source, super options
_MOUNTINFO_MIN_FIELDS = 10


def unescape_mountinfo(field: str) -> str:
    """Undo the kernel's octal escapes (space, tab, newline, backslash) in a mountinfo field."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


@dataclass(frozen=True, slots=True)
class MountRecord:
    """A mountinfo line with the ids that say which mount sits on which."""

    mount_id: int
    parent_id: int
    entry: MountEntry


def parse_mountinfo(text: str) -> list[MountRecord]:
    records: list[MountRecord] = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < _MOUNTINFO_MIN_FIELDS:
            continue
        # Optional fields (shared:N, master:N, ...) run from field 7 up to a lone "-".
        try:
            separator = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < separator + 3:
            continue
        records.append(
            MountRecord(
                mount_id=int(fields[0]),
                parent_id=int(fields[1]),
                entry=MountEntry(
                    mount_point=unescape_mountinfo(fields[4]),
                    source=unescape_mountinfo(fields[separator + 2]),
                    fs_type=unescape_mountinfo(fields[separator + 1]),
                    device_number=fields[2],
                    root=unescape_mountinfo(fields[3]),
                    options=tuple(fields[5].split(",")),
                ),
            )
        )
    return records


def read_mountinfo() -> list[MountRecord]:
    with open(MOUNTINFO, "rb") as handle:
        # surrogateescape, like os.fsdecode: paths compare equal to what os.path functions return.
        return parse_mountinfo(handle.read().decode("utf-8", errors="surrogateescape"))


def escape_mountinfo(path: str) -> str:
    """The kernel's escape of a path in mountinfo (seq_path with " \\t\\n\\\\"): the inverse of
    unescape_mountinfo for every path the kernel prints."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def read_mountinfo_at(mount_point: str) -> list[MountRecord]:
    """The records of read_mountinfo() whose mount point is mount_point. Only those lines are
    parsed, but the kernel still prints, and this still reads and splits, a line for every mount
    in the namespace: the cost grows with the number of mounts on the node. find_mount() asks
    the kernel for the one mount instead, and comes here only when it can't."""
    wanted = os.fsencode(escape_mountinfo(mount_point))
    with open(MOUNTINFO, "rb") as handle:
        text = handle.read()
    lines = [line for line in text.split(b"\n") if line.split(b" ", 5)[4:5] == [wanted]]
    return parse_mountinfo(b"\n".join(lines).decode("utf-8", errors="surrogateescape"))


@dataclass
class StatmountProbe:
    """Whether this kernel names one mount through statmount(2): True until the kernel says it
    has no statmount(2) or no unique mount IDs, then False for as long as its owner lives (the
    system's LinuxMounts, one per process)."""

    works: bool = True


def find_mount(path: str, probe: StatmountProbe, lookups: SharedLookups) -> MountEntry | None:
    """The topmost mount at path (resolved), or None: statx(2) + statmount(2), two syscalls
    whatever the number of mounts; where the kernel can't answer so (and, when no path can be
    answered so, probe.works turns False and statmount is not asked again), the parse of the
    lookups' open scope, else read_mountinfo_at()."""
    if probe.works:
        try:
            return statmount.find(path)
        except statmount.StatmountUnsupported as exc:
            if exc.kernel_wide:
                probe.works = False
            log.debug("%s; reading mountinfo", exc)
    parsed = lookups.current()
    if parsed is None:
        return topmost(read_mountinfo_at(path), path)
    if parsed.records is None:  # the RPC's one parse, shared by its later lookups
        parsed.records = read_mountinfo()
    return topmost(parsed.records, path)


def topmost(records: Sequence[MountRecord], mount_point: str) -> MountEntry | None:
    """The entry at mount_point that nothing else is mounted on."""
    matches = [record for record in records if record.entry.mount_point == mount_point]
    if not matches:
        return None
    covered = {record.parent_id for record in matches}
    uncovered = [record for record in matches if record.mount_id not in covered]
    return (uncovered or matches)[-1].entry
