"""What a doctor check returns, and the helpers every group of checks shares."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.linux import MountRecord, read_mountinfo, topmost

Status = Literal["ok", "warn", "fail"]
STATUSES = ("ok", "warn", "fail")


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict. `fix` says what to do; it is empty only for "ok"."""

    check: str
    status: Status
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        # Status drives the exit code, so a typo must fail loudly rather than count as "ok".
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def crashed(check: str, exc: BaseException) -> Finding:
    # A check that could not run proves nothing, so it must not let the node pass.
    return Finding(
        check,
        "fail",
        f"the check itself failed: {exc!r}",
        "this is a doctor bug or a very unusual node; run the check's steps by hand and report it",
    )


def guarded(check: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return [crashed(check, exc)]


def nearest_existing(path: Path) -> Path:
    """path itself, or its closest ancestor that exists (the root always does)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def mount_of(path: Path) -> MountEntry | None:
    """The mount that holds path: the longest mount point above it, topmost if mounts stack."""
    real = os.path.realpath(path)
    records: list[MountRecord] = read_mountinfo()
    best = ""
    for record in records:
        point = record.entry.mount_point
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best = point
    return topmost(records, best) if best else None


def describe_fs(path: Path) -> str:
    entry = mount_of(path)
    if entry is None:
        return "filesystem unknown"
    return f"{entry.fs_type} on {entry.source}, mounted at {entry.mount_point}"
