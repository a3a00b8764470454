"""What an operator command (inspect, ledger, node, doctor, demo) means when no flag is precise:
the state directory, found as `csi-hostpath volume` finds `make run`'s, and the volume a name
names: a volume ID, the driver's CSI name, or a name `csi-hostpath volume` gave."""

from __future__ import annotations

import sys
from pathlib import Path

from csi_hostpath.core.naming import is_volume_id
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout
from csi_hostpath.volume_cli.args import run_dir_from
from csi_hostpath.volume_cli.exit_codes import FAILED, NO_DRIVER
from csi_hostpath.volume_cli.records import CSI_NAME_PREFIX, RecordsError, RecordsFile


def state_dir(flag: Path | None, default: str) -> Path:
    """--state-dir > `make run`'s state (RUN_DIR/state: $CSI_HOSTPATH_RUN_DIR, else the nearest
    .run here or above) when it holds a database > the installed default."""
    if flag is not None:
        return Path(flag).absolute()
    run_dir, guessed = run_dir_from(None)
    local = run_dir / "state"
    if not guessed and (local / "state.db").exists():
        return local
    return Path(default)


def volume_id(store: Store, state: Path, name: str) -> str | None:
    """The ID of the volume `name` names, or None when nothing here is called that."""
    if is_volume_id(name):
        return name
    for csi_name in (name, CSI_NAME_PREFIX + name):
        volume = store.get_volume_by_name(csi_name)
        if volume is not None:
            return volume.volume_id
    # The volume command's records sit beside `make run`'s state: RUN_DIR/volume-cli.
    try:
        records = RecordsFile(state.parent / "volume-cli").read()
    except RecordsError:
        return None
    record = records.volumes.get(name)
    return record.volume_id if record else None


def not_found(name: str, state: Path) -> str:
    return (
        f"csi-hostpath: no volume {name!r} in {state}: not a volume ID, a CSI name, nor a name "
        "`csi-hostpath volume` gave\n  next: `csi-hostpath volume list` or `csi-hostpath ledger "
        "list` shows the volumes there; is --state-dir right?"
    )


def existing_volume(store: Store, layout: PoolLayout, state: Path, name: str) -> str | None:
    """The ID, when the volume is in the database or its backing file in the pool."""
    found = volume_id(store, state, name)
    if found is None:
        return None
    if store.get_volume(found) is None and not layout.volume_file(found).exists():
        return None
    return found


# The exit code of "no driver state here": `csi-hostpath volume`'s for "no driver found", so a
# script sees one code for one situation, whichever command it ran.
NO_STATE = NO_DRIVER


def display_name(store: Store, volume_id: str) -> str:
    """The name a person knows the volume by: the one `csi-hostpath volume` gave, else its CSI
    name (a PVC's pvc-UID), else "-"."""
    volume = store.get_volume(volume_id)
    if volume is None or not volume.name:
        return "-"
    return volume.name.removeprefix(CSI_NAME_PREFIX)


def no_state(state: Path) -> str:
    return (
        f"csi-hostpath: no driver state in {state}\n  next: pass --state-dir (the driver's), or "
        "run this in the checkout where `make run` keeps ./.run (or below it), or set "
        "$CSI_HOSTPATH_RUN_DIR"
    )


def open_state(state: Path, *, write: bool = False) -> Store | int:
    """The state's store, read-only unless write (a command that only looks never migrates or
    writes it); or, after saying why on stderr, the exit code: this user may not use it, there
    is none, or sqlite can't read it."""
    from csi_hostpath.store.db import (
        StateDenied,
        StateOutdated,
        StateUnreadable,
        open_read_only,
    )
    from csi_hostpath.store.private import denied

    # Before looking for state.db: in a directory this user can't enter, it looks absent.
    problem = denied(state, write=write)
    if problem is not None:
        print(f"csi-hostpath: {problem}", file=sys.stderr)
        return FAILED
    if not (state / "state.db").exists():
        print(no_state(state), file=sys.stderr)
        return NO_STATE
    try:
        return Store(state / "state.db") if write else open_read_only(state / "state.db")
    except (StateDenied, StateOutdated, StateUnreadable) as e:
        print(f"csi-hostpath: {e}", file=sys.stderr)
        return FAILED
