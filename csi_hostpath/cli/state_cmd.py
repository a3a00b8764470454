"""`csi-hostpath state rebuild`: rebuild the controller's database from the pool's files.

What a controller does at every start, as an operator command with a report: claim the pool for
this state directory's database (``--take-over`` replaces another database's claim), re-adopt
every backing file that carries an identity, quarantine what carries none, and raise every
volume's fencing token to the newest one issued. Nothing is deleted. Refused while a daemon holds
the state directory: stop the controller first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from csi_hostpath.daemon.server import StateDirLocked, lock_state_dir
from csi_hostpath.service.controller import sync_lease
from csi_hostpath.service.controller.open_pool import open_pool
from csi_hostpath.store.backing.owner import PoolClaimRefused
from csi_hostpath.store.db import Store
from csi_hostpath.store.pool_layout import PoolLayout


def rebuild(state_dir: Path, pool_dir: Path, take_over: bool, out: TextIO = sys.stdout) -> int:
    if not (pool_dir / "volumes").is_dir():
        print(f"csi-hostpath: {pool_dir} holds no pool (no volumes/ in it)", file=sys.stderr)
        return 2
    try:
        lock = lock_state_dir(state_dir)
    except StateDirLocked as e:
        print(f"csi-hostpath: {e}; stop the controller, then rebuild", file=sys.stderr)
        return 1
    try:
        layout = PoolLayout(pool_dir)
        layout.ensure()
        store = Store(state_dir / "state.db")
        try:
            claim, report = open_pool(store, layout, state_dir, take_over=take_over)
            try:
                for volume in store.all_volumes():
                    sync_lease(store, layout, volume.volume_id)
            finally:
                claim.release()
        except PoolClaimRefused as e:
            print(f"refused: {e}", file=sys.stderr)
            return 1
        finally:
            store.close()
    finally:
        lock.close()
    if claim.took_over is not None:
        print(
            f"took the pool over from database {claim.took_over.get('db_id')} "
            f"(state directory {claim.took_over.get('state_dir')})",
            file=out,
        )
    print(f"rebuilt {state_dir / 'state.db'} from {pool_dir}: {report.summary()}", file=out)
    for name in report.adopted:
        print(f"  re-adopted {name}", file=out)
    for path, why in report.quarantined:
        print(f"  quarantined {path}: {why}", file=out)
    return 0
