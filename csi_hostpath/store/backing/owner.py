"""Which database owns a pool: POOL/.owner names the database's ID (kept in its `meta` table) and
its state directory, and POOL/.owner.lock is flocked by the controller that serves it.

Two databases indexing one pool would each call the other's files unknown; this marker makes the
second one refuse to start instead. A database that lost its state (same state directory, empty
database: state.db deleted or truncated, or a controller pod moved to a node with an empty
hostPath) is the same owner, and takes the pool back by rebuilding from it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from csi_hostpath.store.pool_layout import PoolLayout, write_atomically
from csi_hostpath.system.flock import hold_exclusive

if TYPE_CHECKING:  # a Store is only passed in; store/db.py imports this module to open one
    from csi_hostpath.store.db import Store


class PoolClaimRefused(RuntimeError):
    """Another database owns this pool (or its controller is running)."""


def rebuild_command(state_dir: Path, pool_dir: Path) -> str:
    return f"csi-hostpath state rebuild --state-dir {state_dir} --pool-dir {pool_dir} --take-over"


def read_owner(layout: PoolLayout) -> dict[str, Any] | None:
    try:
        body = json.loads((layout.root / ".owner").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"db_id": "?", "state_dir": "?", "unreadable": True}
    return body if isinstance(body, dict) else {"db_id": "?", "state_dir": "?"}


@dataclass
class PoolClaim:
    handle: IO[bytes]
    owner: dict[str, Any]
    took_over: dict[str, Any] | None  # the marker replaced, if any

    def release(self) -> None:
        self.handle.close()


def claim_pool(
    store: Store,
    layout: PoolLayout,
    state_dir: Path,
    *,
    take_over: bool = False,
) -> PoolClaim:
    """Hold the pool for this database, or raise PoolClaimRefused saying what to run."""
    layout.root.mkdir(parents=True, exist_ok=True)
    handle = hold_exclusive(layout.root / ".owner.lock")  # held while serving
    if handle is None:
        raise PoolClaimRefused(
            f"another csi-hostpath controller is serving pool {layout.root} right now (it holds "
            f"{layout.root / '.owner.lock'}); give each controller its own pool, or stop that one "
            "first"
        )
    try:
        mine, fresh = store.database_id()
        owner = read_owner(layout)
        took_over = None
        if owner is not None and owner.get("db_id") != mine:
            same_dir = owner.get("state_dir") == str(state_dir)
            if not (take_over or (same_dir and fresh)):
                raise PoolClaimRefused(
                    f"pool {layout.root} belongs to another database (id "
                    f"{owner.get('db_id')}, state directory {owner.get('state_dir')}, claimed "
                    f"{_when(owner.get('claimed_at'))}); this one ({mine}, {state_dir}) would "
                    "call that database's volumes unknown. If --state-dir is a typo, start with "
                    "the right one. If that database is gone for good, take the pool over: "
                    f"`{rebuild_command(state_dir, layout.root)}` (it rebuilds this database "
                    "from the pool's files; nothing is deleted)"
                )
            took_over = owner
        body = {
            "db_id": mine,
            "state_dir": str(state_dir),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "claimed_at": time.time(),
        }
        write_atomically(layout.root / ".owner", json.dumps(body, sort_keys=True).encode())
        return PoolClaim(handle, body, took_over)
    except BaseException:
        handle.close()
        raise


def _when(at: object) -> str:
    if not isinstance(at, int | float):
        return "at an unknown time"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
