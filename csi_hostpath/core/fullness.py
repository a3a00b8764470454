"""Is this failure "the disk is full"? One answer for the status table and the teardown retry.

sqlite reports a full filesystem as SQLITE_FULL ("database or disk is full"), the kernel as
ENOSPC or EDQUOT; each is RESOURCE_EXHAUSTED, not INTERNAL. (The system layer's NoSpace has its
own row in the status table.)"""

from __future__ import annotations

import errno

SQLITE_FULL = 13  # sqlite3.h; Python exposes it as sqlite3.SQLITE_FULL from 3.11 on
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        # Known by its module, so the core needs no sqlite import: every sqlite3 error class
        # (OperationalError, DatabaseError, ...) is defined in module sqlite3.
        if type(current).__module__ == "sqlite3":
            code = getattr(current, "sqlite_errorcode", None)
            if code == SQLITE_FULL or "database or disk is full" in str(current):
                return True
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
    return False
