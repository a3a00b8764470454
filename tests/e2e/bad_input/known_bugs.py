"""Driver bugs the fuzz steps around while they stand, and the triggers of each.

Each bug is pinned by a strict xfail test in tests/e2e/test_driver_bugs.py; while it stands, the
strategies (request_strategies.py) leave its trigger out, so that every run keeps looking for new
failures instead of finding these again. Remove an entry once the driver is fixed and its xfail is
gone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

KNOWN_BUGS: frozenset[str] = frozenset()  # every bug the fuzz found so far is fixed


def path_type_bug(request: Any) -> bool:
    """Would the request publish a block volume onto a directory, a filesystem onto a file, or
    use a path under a regular file? (Decided on the filesystem as it is when drawn, which is
    as it is when sent: examples run one at a time.)"""
    for name in ("target_path", "staging_target_path"):
        path = getattr(request, name, "")
        if not path.startswith("/") or "\x00" in path or len(path) > 4096:
            continue
        if any(os.path.lexists(p) and not os.path.isdir(p) for p in Path(path).parents):
            return True
        exists, is_dir = os.path.lexists(path), os.path.isdir(path)
        block = request.volume_capability.HasField("block")
        if name == "target_path" and (is_dir if block else exists and not is_dir):
            return True
        if name == "staging_target_path" and exists and not is_dir and not block:
            return True
    return False


def nests(request: Any, mounted: set[str]) -> bool:
    """Would the request mount inside something mounted (so that unmounting that one later is
    EBUSY)?"""
    for name in ("target_path", "staging_target_path"):
        path = getattr(request, name, "")
        if any(path.startswith(point + "/") for point in mounted):
            return True
    return False


def shrinks(request: Any) -> bool:
    """ControllerExpandVolume with only a limit: the driver records the limit as the size."""
    r = request.capacity_range
    return bool(r.required_bytes == 0 and r.limit_bytes > 0)


def int_bug(s: str) -> bool:
    """int(s) fails though s.isdigit(): superscripts and the like, or over 4300 digits."""
    return s.isdigit() and (not s.isdecimal() or len(s) > 4000)
