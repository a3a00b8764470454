"""Durable state in sqlite: the controller's catalog of volumes and snapshots (catalog.py), the
publish ledger and audit trail (ledger_store.py), and a node's record of what it staged and
published (node_records.py), on one connection (connection.py). In --mode all one database holds
both the controller's tables and the node's.

Opening it: a state.db sqlite can't read ends the daemon with a StateUnreadable that names the
file, not a raw sqlite traceback. The pool is the truth (each backing file carries its identity),
so the next step is always the same: move the broken file aside and rebuild the index from the
pool."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from csi_hostpath.core.fullness import is_disk_full
from csi_hostpath.store.backing.owner import rebuild_command
from csi_hostpath.store.catalog import Catalog
from csi_hostpath.store.ledger_store import Ledger
from csi_hostpath.store.node_records import NodeRecords
from csi_hostpath.store.private import StateDenied, StateOutdated, denied
from csi_hostpath.store.rows import AuditEntry

__all__ = [
    "AuditEntry",
    "StateDenied",
    "StateOutdated",
    "StateUnreadable",
    "Store",
    "open_read_only",
    "open_store",
]


class Store(Catalog, Ledger, NodeRecords):
    """Every table of the state database, through one connection and one write lock."""


class StateUnreadable(RuntimeError):
    """state.db exists but sqlite can't use it (corrupt, truncated, not a database)."""


def open_store(db_path: Path, pool_dir: Path) -> Store:
    try:
        return Store(db_path)
    except sqlite3.DatabaseError as e:
        if is_disk_full(e):
            raise
        raise StateUnreadable(
            f"the state database {db_path} is unreadable ({e}). The pool still holds every "
            f"volume: move the file aside and rebuild the index from the pool: "
            f"mv {db_path} {db_path}.corrupt && {rebuild_command(db_path.parent, pool_dir)}"
        ) from e


def open_read_only(db_path: Path) -> Store:
    """The store for a command that only looks. StateDenied when this user can't read it,
    StateOutdated when the driver has not upgraded it yet, StateUnreadable when sqlite can't."""
    problem = denied(db_path.parent)
    if problem is not None:
        raise StateDenied(problem)
    try:
        return Store(db_path, read_only=True)
    except PermissionError as e:
        raise StateDenied(denied(db_path.parent) or f"permission denied: {e}") from e
    except sqlite3.DatabaseError as e:
        raise StateUnreadable(
            f"the state database {db_path} can't be read ({e})\n  next: `csi-hostpath doctor` "
            "says what is wrong with the state directory"
        ) from e
