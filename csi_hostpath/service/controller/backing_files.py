"""How the controller makes and removes a backing file, so that a crash at any step can be told
apart afterwards (the controller's side of "the pool is the truth"; open_pool.py is what it does
with the pool before it serves)."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from csi_hostpath.store.backing import file_identity
from csi_hostpath.system.base import NoSpace, Pool


@contextmanager
def making(pool: Pool, path: Path, body: dict[str, Any]) -> Iterator[Callable[[], None]]:
    """Make a backing file under an intent. The caller creates the file, calls the yielded
    function to attach its identity, and commits the record; all inside the block. If anything
    fails the half-made file goes (it was never handed out); if all succeeds the intent is
    cleared. A crash leaves an intent that start-up reads (store/backing/adopt_pool.py)."""
    try:
        file_identity.begin(path, body)
        yield lambda: file_identity.write_identity(path, body)
    except BaseException as exc:
        discard(pool, path)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpace(f"no room in the pool for {path.name}'s identity: {exc}") from exc
        raise
    file_identity.finish(path)


def discard(pool: Pool, path: Path) -> None:
    """Remove a backing file and what describes it (sidecar, intent)."""
    pool.remove(path)
    file_identity.remove_identity(path)
