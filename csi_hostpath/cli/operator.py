"""The operator's commands: doctor, demo, inspect and ledger. Each parses nothing and decides
nothing: it opens the state, calls the use-case (doctor/, service/), and prints."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from csi_hostpath.cli.parser import DEFAULT_STATE_DIR


def state_dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    from csi_hostpath.cli.lookup import state_dir as find_state_dir

    state_dir = find_state_dir(args.state_dir, DEFAULT_STATE_DIR)
    return state_dir, Path(args.pool_dir).absolute() if args.pool_dir else state_dir / "pool"


def doctor_main(args: argparse.Namespace) -> int:
    from csi_hostpath.doctor import diagnose, exit_code, render

    state_dir, pool_dir = state_dirs(args)
    findings = diagnose(state_dir, pool_dir, args.endpoint, lost_after=args.node_lost_after)
    print(render(findings))
    return exit_code(findings)


def demo_main(args: argparse.Namespace) -> int:
    from csi_hostpath.cli.demo import run_demo
    from csi_hostpath.cli.lookup import NO_STATE
    from csi_hostpath.volume_cli.args import ENDPOINT_ENV, EndpointError, endpoint_url

    state_dir, pool_dir = state_dirs(args)
    # As `csi-hostpath volume` finds it: the flag, $CSI_HOSTPATH_ENDPOINT, else the socket
    # beside `make run`'s state.
    given = args.endpoint or os.environ.get(ENDPOINT_ENV)
    beside = state_dir.parent / "csi.sock"
    if not given and not beside.exists():
        print(
            f"csi-hostpath demo: no driver socket at {beside}\n  next: start the driver "
            "(`make run`), or pass --endpoint unix:///path/to/csi.sock",
            file=sys.stderr,
        )
        return NO_STATE
    try:
        endpoint = endpoint_url(given) if given else f"unix://{beside}"
    except EndpointError as e:
        print(f"csi-hostpath demo: {e}", file=sys.stderr)
        return 2
    return run_demo(endpoint, state_dir, pool_dir, sys.stdout)


def inspect_main(args: argparse.Namespace) -> int:
    from csi_hostpath.cli.lookup import existing_volume, not_found, open_state
    from csi_hostpath.service.inspect import as_json, inspect_volume, render_phases
    from csi_hostpath.store.pool_layout import PoolLayout
    from csi_hostpath.volume_cli.records import CSI_NAME_PREFIX

    state_dir, pool_dir = state_dirs(args)
    store = open_state(state_dir)
    if isinstance(store, int):
        return store
    layout = PoolLayout(pool_dir)
    try:
        volume_id = existing_volume(store, layout, state_dir, args.volume)
        if volume_id is None:
            print(not_found(args.volume, state_dir), file=sys.stderr)
            return 3
        volume = store.get_volume(volume_id)
        made_here = volume is not None and volume.name.startswith(CSI_NAME_PREFIX)
        phases = inspect_volume(
            store,
            layout,
            volume_id,
            args.node_grace,
            lost_after=args.node_lost_after,
            local_name=volume.name.removeprefix(CSI_NAME_PREFIX) if volume and made_here else "",
        )
    finally:
        store.close()
    if args.json:
        print(json.dumps({"volume": volume_id, "phases": as_json(phases)}, indent=2))
    else:
        print(render_phases(phases))
    return 0


def _age(seconds: float | None) -> str:
    from csi_hostpath.service.inspect import human_age

    return "never seen" if seconds is None else human_age(seconds)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from csi_hostpath.core.request_text import shown

    # Names and reasons come from requests and the command line: a newline in one must not
    # print a row of its own (a forged audit entry), so every cell is shown on one line.
    rows = [[shown(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def ledger_main(args: argparse.Namespace) -> int:
    from csi_hostpath.cli.lookup import display_name, not_found, open_state, volume_id
    from csi_hostpath.core.errors import DriverError
    from csi_hostpath.service.controller import PublishLedger
    from csi_hostpath.service.inflight import InFlight
    from csi_hostpath.store.pool_layout import PoolLayout

    state_dir, pool_dir = state_dirs(args)
    # list and audit only read: a user who may read the state may run them, and they never
    # upgrade or write it (the controller imports the nodes' events; audit shows them meanwhile).
    store = open_state(state_dir, write=args.ledger_command == "force-detach")
    if isinstance(store, int):
        return store
    try:
        volume = getattr(args, "volume", "")
        if volume:
            found = volume_id(store, state_dir, volume)
            if found is None:
                print(not_found(volume, state_dir), file=sys.stderr)
                return 3
            args.volume = found
        node_grace = getattr(args, "node_grace", 0.0)
        publications = PublishLedger(store, PoolLayout(pool_dir), InFlight(), node_grace=node_grace)
        if args.ledger_command == "list":
            rows = [
                [
                    p.volume_id,
                    p.node_id,
                    p.access_mode.name,
                    "yes" if p.readonly else "no",
                    str(p.generation),
                    _when(p.published_at),
                    _age(age),
                    # Last: scripts read the columns before it by position.
                    display_name(store, p.volume_id),
                ]
                for p, age in publications.holders(args.volume)
            ]
            print_table(
                [
                    "volume",
                    "node",
                    "mode",
                    "readonly",
                    "generation",
                    "since",
                    "heartbeat age",
                    "name",
                ],
                rows,
            )
            return 0
        if args.ledger_command == "audit":
            print_table(
                ["when", "actor", "action", "volume", "node", "generation", "name", "reason"],
                [
                    [
                        _when(a.at),
                        a.actor,
                        a.action,
                        a.volume_id,
                        a.node_id,
                        str(a.generation),
                        # After the columns scripts read by position; the free-text reason last.
                        display_name(store, a.volume_id),
                        a.reason,
                    ]
                    for a in publications.audit(args.volume, read_only=True)
                ],
            )
            return 0
        # force-detach
        actor = f"cli:{getpass.getuser()}@{socket.gethostname()}:pid{os.getpid()}"
        try:
            revoked, age = publications.force_detach(
                args.volume,
                args.node,
                accept_data_loss=args.i_accept_data_loss,
                actor=actor,
                reason=args.reason,
            )
        except DriverError as e:
            print(f"refused: {e}", file=sys.stderr)
            return 1
        if revoked is None:
            print(f"node {args.node!r} holds no publication of {args.volume}; nothing to do")
            return 0
        print(
            f"Force-detached {args.volume} from node {args.node!r} (generation "
            f"{revoked.generation} revoked; node heartbeat {_age(age)} old). RISK: if that node "
            "is still running and writing, the next node to mount this volume can corrupt it; "
            "it will fence itself if it comes back and checks its lease."
        )
        return 0
    finally:
        store.close()
