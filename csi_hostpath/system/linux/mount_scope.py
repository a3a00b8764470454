"""One read of /proc/self/mountinfo per RPC, shared by every mount lookup in it, where the kernel
can't name a single mount (no statmount(2): Linux < 6.8, or no sb_source: < 6.11).

The api layer opens a scope around each RPC (api/status.py); LinuxMounts' fallback parses
mountinfo once inside it and answers every later lookup from that parse, until a mount, bind or
unmount made through LinuxMounts drops it. Outside a scope (reconcile at start, tools) each
lookup reads mountinfo for itself, as before. With statmount nothing here is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass
class ParsedMountinfo:
    """One RPC's parse of mountinfo, shared by its lookups until the mount table changes."""

    records: list[Any] | None = None  # mounts.MountRecord; None until the first lookup


_CURRENT: ContextVar[ParsedMountinfo | None] = ContextVar("csi_hostpath_mountinfo", default=None)


@contextlib.contextmanager
def shared_mountinfo() -> Iterator[None]:
    token = _CURRENT.set(ParsedMountinfo())
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> ParsedMountinfo | None:
    return _CURRENT.get()


def changed() -> None:
    """The mount table changed under this RPC: the next lookup parses mountinfo again."""
    parsed = _CURRENT.get()
    if parsed is not None:
        parsed.records = None
