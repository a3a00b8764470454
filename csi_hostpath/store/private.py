"""The state is root's alone: the state directory 0700, the database and its -wal and -shm 0600,
and the commands that only look open it read-only. A user who can't reach it is told so, with
the owner, instead of "no state here" or sqlite's "attempt to write a readonly database".

The socket is 0600 already (daemon/server.py); the ledger behind it, with every node, volume and
name, must not be readable by any local user either. sqlite gives the -wal and -shm files the
mode of the database file, so a database born 0600 keeps all three private."""

from __future__ import annotations

import contextlib
import os
import pwd
import sqlite3
import stat
from pathlib import Path

from csi_hostpath.store.migrations import SCHEMA_VERSION

STATE_DIR_MODE = 0o700
FILE_MODE = 0o600


class StateDenied(RuntimeError):
    """This user may not read (or write) the state: not a fault of the state itself."""


class StateOutdated(RuntimeError):
    """A read-only command met a database the driver has not upgraded yet."""


def _owner(st: os.stat_result) -> str:
    try:
        return pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        return f"uid {st.st_uid}"


def _tighten(path: Path, mode: int) -> None:
    """chmod to mode when this process owns path and it allows more; never anyone else's."""
    with contextlib.suppress(FileNotFoundError, PermissionError):
        st = path.stat()
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & ~mode:
            path.chmod(mode)


def private_state_dir(state_dir: Path) -> None:
    """Make the state directory (0700), or take an existing one of ours down to 0700."""
    state_dir.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
    _tighten(state_dir, STATE_DIR_MODE)


def create_private(path: Path) -> None:
    """Create an empty database file 0600 before sqlite opens it (sqlite would make it 0644)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))


def tighten_database(path: Path) -> None:
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}-journal"):
        _tighten(path.with_name(name), FILE_MODE)


def denied(state_dir: Path, *, write: bool = False) -> str | None:
    """Why this user can't use the state at state_dir, or None (also when there is none)."""
    try:
        st = state_dir.stat()
    except FileNotFoundError:
        return None
    except PermissionError:
        # A directory above it can't be entered: name the first one, by its owner and mode.
        for above in reversed(state_dir.parents):
            if not os.access(above, os.X_OK):
                st = above.stat()
                return _denied_message(
                    state_dir, st, f"{above} is mode {stat.S_IMODE(st.st_mode):04o}"
                )
        raise
    db = state_dir / "state.db"
    if write and os.statvfs(state_dir).f_flag & os.ST_RDONLY:
        return (
            f"read-only: the state at {state_dir} is on a read-only filesystem, and this command "
            "writes it\n  next: run it where the state is mounted read-write (the driver's own)"
        )
    want = os.R_OK | os.X_OK | (os.W_OK if write else 0)
    if not os.access(state_dir, want):
        return _denied_message(state_dir, st, f"mode {stat.S_IMODE(st.st_mode):04o}")
    if db.exists() and not os.access(db, os.R_OK | (os.W_OK if write else 0)):
        db_st = db.stat()
        return _denied_message(state_dir, db_st, f"state.db mode {stat.S_IMODE(db_st.st_mode):04o}")
    return None


def _denied_message(state_dir: Path, st: os.stat_result, what: str) -> str:
    owner = _owner(st)
    return (
        f"permission denied: the state at {state_dir} belongs to {owner} ({what}), and this "
        f"command runs as {_owner_of_process()}\n  next: run it as {owner} (e.g. with sudo)"
    )


def _owner_of_process() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def open_read_only(path: Path) -> sqlite3.Connection:
    """path opened with mode=ro. On a read-only filesystem with no -wal left behind (no writer
    can be there), sqlite can't make the -shm a WAL database needs, so it is read as immutable."""
    uri = f"{path.as_uri()}?mode=ro"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)
    try:
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        db.close()
        wal = path.with_name(f"{path.name}-wal")
        if os.access(path.parent, os.W_OK) or wal.exists():
            raise
        db = sqlite3.connect(
            f"{uri}&immutable=1", uri=True, isolation_level=None, check_same_thread=False
        )
    return db


def check_schema(found: int, path: Path) -> None:
    if found > SCHEMA_VERSION:
        raise StateOutdated(
            f"{path} has schema version {found}, newer than this csi-hostpath's "
            f"{SCHEMA_VERSION}\n  next: use the csi-hostpath of the driver that wrote it"
        )
    if found < SCHEMA_VERSION:
        raise StateOutdated(
            f"{path} has schema version {found}; this csi-hostpath reads {SCHEMA_VERSION}, and "
            "a command that only reads never upgrades it\n  next: start the driver (csi-hostpath "
            "serve) on this state once: it upgrades the database"
        )
