"""Command line: `serve` runs the driver; `ledger` inspects and, when an operator decides so,
overrides the publish ledger; `registrar` and `livenessprobe` are the node plugin's kubelet-facing
sidecars (csi_hostpath/sidecars)."""

from __future__ import annotations

import argparse
import math
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from csi_hostpath import __version__
from csi_hostpath.core.model import PoolScope
from csi_hostpath.core.nodeloss import DEFAULT_LOST_AFTER
from csi_hostpath.daemon.config import (
    DEFAULT_DRIVER_NAME,
    DEFAULT_MAX_INLINE_SIZE,
    Config,
    Mode,
)

DEFAULT_STATE_DIR = "/var/lib/csi-hostpath"
VOLUME_FILTER_HELP = "a volume ID, or its name (default empty: every volume)"


def _size(text: str) -> int:
    """A size in bytes as a Kubernetes quantity: 0, 10737418240, 10Gi, 1.5Ti, 1e12."""
    from csi_hostpath.core.sizes import QuantityError, parse_size

    try:
        return parse_size(text)
    except QuantityError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _checked(
    name: str, convert: Callable[[str], Any], ok: Callable[[Any], bool], what: str
) -> Callable[[str], Any]:
    """An argparse type: convert the text, then refuse a value that is not `what`. The name is
    the one argparse shows when the conversion itself fails ("invalid _positive_int value")."""

    def parse(text: str) -> Any:
        value = convert(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = name
    return parse


_positive_size = _checked("_positive_size", _size, lambda v: v > 0, "a size > 0")
# nan compares false with everything, so `nan <= 0` lets it through and every later
# `age < grace` check silently says no; inf makes a loop that never wakes.
_positive_float = _checked(
    "_positive_float", float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0"
)
_positive_int = _checked("_positive_int", int, lambda v: v > 0, "an integer > 0")
_non_negative_int = _checked("_non_negative_int", int, lambda v: v >= 0, ">= 0")


def _add_state_args(p: argparse.ArgumentParser, default: object = None) -> None:
    """--state-dir and --pool-dir. Only serve has a fixed default; the other commands look for
    `make run`'s state first (lookup.py). default=SUPPRESS for a subcommand's copy of options
    its group takes too (`ledger --state-dir DIR list`)."""
    p.add_argument(
        "--state-dir",
        type=Path,
        default=default,
        # SUPPRESS is a (true) string: its copy looks for `make run`'s state like the group's.
        help=f"directory for the sqlite state (default {DEFAULT_STATE_DIR})"
        if default not in (None, argparse.SUPPRESS)
        else "directory for the sqlite state (default `make run`'s RUN_DIR/state when there is "
        f"one here or above, else {DEFAULT_STATE_DIR})",
    )
    p.add_argument(
        "--pool-dir",
        type=Path,
        default=argparse.SUPPRESS if default is argparse.SUPPRESS else None,
        help="directory holding the backing files (default STATE_DIR/pool)",
    )


def _add_node_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--self-publish",
        action="store_true",
        help="NodeStage publishes the volume to this node itself and NodeUnstage unpublishes it, "
        "for a CO that does no attach (CSIDriver attachRequired: false); needs --pool-scope local "
        "and --mode all",
    )
    p.add_argument(
        "--allow-inline-volumes",
        action="store_true",
        help="serve CSI inline ephemeral volumes (off by default: any pod author could take "
        "node disk outside every quota); each is a file in the pool, capped by --max-inline-size",
    )
    p.add_argument(
        "--max-inline-size",
        type=_positive_size,
        default=DEFAULT_MAX_INLINE_SIZE,
        help="largest inline ephemeral volume, in bytes or as a quantity like 1Gi "
        f"(default {DEFAULT_MAX_INLINE_SIZE})",
    )


def _add_state_command(sub: Any) -> None:
    state = sub.add_parser("state", help="the controller's database and its pool")
    ssub = state.add_subparsers(dest="state_command", required=True)
    rebuild = ssub.add_parser(
        "rebuild", help="rebuild the database from the pool's files (nothing is deleted)"
    )
    _add_state_args(rebuild)
    rebuild.add_argument(
        "--take-over", action="store_true", help="claim a pool another database claims"
    )


def _add_many_machines_args(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--max-volume-size",
        type=_size,
        default=0,
        help="largest volume, in bytes or as a quantity like 10Gi (default 0: as large as the "
        "pool)",
    )
    serve.add_argument(
        "--overcommit-ratio",
        type=_positive_float,
        default=1.0,
        help="sizes of all volumes may reach this many times the pool's room (default 1.0: "
        "never promise a byte the pool can't write); finite, above 0",
    )
    _add_lost_after(serve)


def _add_lost_after(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-lost-after",
        type=_positive_float,
        default=DEFAULT_LOST_AFTER,
        help="seconds of node plugin silence after which a local volume's node, and so the "
        "volume, counts as lost (DeleteVolume then succeeds while that node holds it; "
        "default %(default)g)",
    )


def _add_operator_commands(sub: Any) -> None:
    inspect = sub.add_parser("inspect", help="where a volume is in its lifecycle, and why")
    _add_state_args(inspect)
    inspect.add_argument("volume")
    inspect.add_argument("--json", action="store_true", help="machine-readable output")
    _add_lost_after(inspect)
    inspect.add_argument(
        "--node-grace",
        type=_positive_float,
        default=60.0,
        help="a node silent this long (s) counts as gone (default %(default)g)",
    )

    doctor = sub.add_parser("doctor", help="check this machine and say what to fix")
    _add_state_args(doctor)
    _add_lost_after(doctor)
    doctor.add_argument("--endpoint", default=None, help="unix:///path.sock to check as well")

    demo = sub.add_parser("demo", help="take a volume through every phase on a running driver")
    _add_state_args(demo)
    demo.add_argument(
        "--endpoint",
        default=None,
        help="the running driver's socket: unix:///path.sock or its path (default "
        "$CSI_HOSTPATH_ENDPOINT, else the csi.sock beside `make run`'s state)",
    )
    from csi_hostpath.cli.node_cmd import add_node_parser

    add_node_parser(sub, _add_state_args, _add_lost_after)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="csi-hostpath",
        description="A CSI driver whose volumes are sparse files on loop devices.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the CSI driver on a unix socket")
    serve.add_argument(
        "--endpoint", required=True, help="unix:///absolute/path.sock where the driver listens"
    )
    serve.add_argument(
        "--node-id",
        default=socket.gethostname(),
        help="this node's ID (default: the hostname, here %(default)s)",
    )
    _add_state_args(serve, Path(DEFAULT_STATE_DIR))
    serve.add_argument(
        "--pool-scope",
        choices=[s.value for s in PoolScope],
        default=PoolScope.LOCAL.value,
        help="local: the pool lives on this node; shared: every node sees it (default %(default)s)",
    )
    serve.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.ALL.value,
        help="the services this process serves: all (controller and node), controller, or node "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--driver-name",
        default=DEFAULT_DRIVER_NAME,
        help="the CSI driver name it answers GetPluginInfo with (default %(default)s)",
    )
    _add_many_machines_args(serve)
    serve.add_argument(
        "--max-volumes-per-node",
        type=_non_negative_int,
        default=0,
        help=(
            "publications a node may hold (default 0: no limit but the loop devices it can "
            "still get, which NodeGetInfo reports either way)"
        ),
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe level logged (default %(default)s)",
    )
    serve.add_argument(
        "--fence-interval",
        type=_positive_float,
        default=5.0,
        help="seconds between a node's checks of its staged volumes' leases (default %(default)g)",
    )
    serve.add_argument(
        "--heartbeat-interval",
        type=_positive_float,
        default=2.0,
        help="seconds between a node's heartbeats (default %(default)g)",
    )
    serve.add_argument(
        "--max-freeze-seconds",
        type=_positive_float,
        default=30.0,
        help="longest a snapshot or clone may hold a filesystem frozen; past it, the filesystem "
        "is thawed and the snapshot fails ABORTED (default %(default)g)",
    )
    serve.add_argument(
        "--node-grace",
        type=_positive_float,
        default=60.0,
        help="seconds of heartbeat silence after which a node counts as gone (default %(default)g)",
    )
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=16,
        help="threads that run the calls' work; more calls at once wait in a queue, never "
        "refused (default %(default)s)",
    )
    serve.add_argument(
        "--metrics-address",
        default="",
        help="HOST:PORT (or :PORT) to serve Prometheus metrics on (default empty: off)",
    )
    serve.add_argument(
        "--ledger-view",
        action="store_true",
        help="on the metrics address, also serve what the ledger knows of a volume "
        "(GET /ledger/v1/volumes/ID, JSON, read-only; for `kubectl csi-hostpath why`); a "
        "controller only; default off",
    )
    _add_node_policy_args(serve)
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text: key=value lines; json: one JSON object per line (default %(default)s)",
    )

    _add_operator_commands(sub)
    _add_state_command(sub)

    ledger = sub.add_parser("ledger", help="read or override the publish ledger")
    _add_state_args(ledger)
    lsub = ledger.add_subparsers(dest="ledger_command", required=True)
    lst = lsub.add_parser("list", help="who holds which volume")
    _add_state_args(lst, argparse.SUPPRESS)
    lst.add_argument("--volume", default="", help=VOLUME_FILTER_HELP)
    audit = lsub.add_parser("audit", help="the audit trail: publishes, force-detaches, fences")
    _add_state_args(audit, argparse.SUPPRESS)
    audit.add_argument("--volume", default="", help=VOLUME_FILTER_HELP)
    force = lsub.add_parser(
        "force-detach",
        help="revoke a node's hold on a volume when that node is gone for good",
    )
    _add_state_args(force, argparse.SUPPRESS)
    force.add_argument("volume")
    force.add_argument("--node", required=True, help="the node whose hold is revoked")
    force.add_argument("--reason", required=True, help="why; recorded in the audit trail")
    force.add_argument(
        "--node-grace",
        type=_positive_float,
        default=60.0,
        help="refuse while the node's heartbeat is younger than this (s; default %(default)g)",
    )
    force.add_argument(
        "--i-accept-data-loss",
        action="store_true",
        help="force even though the node still heartbeats",
    )
    from csi_hostpath.cli.run_dir import add_run_dir_parser
    from csi_hostpath.volume_cli.args import RUN_DIR_HELP, add_volume_parser

    add_volume_parser(sub)
    add_run_dir_parser(sub, RUN_DIR_HELP)
    from csi_hostpath.sidecars.flags import add_sidecar_parsers

    add_sidecar_parsers(sub)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    if args.self_publish and (args.pool_scope != "local" or args.mode != "all"):
        # Only a node that is its pool's controller can grant itself a hold; in shared scope the
        # central ledger must decide between nodes, through the attacher.
        raise ValueError(
            "--self-publish needs --pool-scope local and --mode all (the node must be the "
            "controller of its own pool); drop it, or run the local shape"
        )
    if args.ledger_view and not args.metrics_address:
        raise ValueError("--ledger-view is served on the metrics address: give --metrics-address")
    state_dir = Path(args.state_dir).absolute()
    pool_dir = Path(args.pool_dir).absolute() if args.pool_dir else state_dir / "pool"
    return Config(
        endpoint=args.endpoint,
        node_id=args.node_id,
        state_dir=state_dir,
        pool_dir=pool_dir,
        pool_scope=PoolScope(args.pool_scope),
        mode=Mode(args.mode),
        driver_name=args.driver_name,
        max_volume_size=args.max_volume_size,
        overcommit_ratio=args.overcommit_ratio,
        max_volumes_per_node=args.max_volumes_per_node,
        log_level=args.log_level,
        fence_interval=args.fence_interval,
        heartbeat_interval=args.heartbeat_interval,
        node_grace=args.node_grace,
        node_lost_after=args.node_lost_after,
        max_freeze_seconds=args.max_freeze_seconds,
        workers=args.workers,
        metrics_address=args.metrics_address,
        ledger_view=args.ledger_view,
        log_format=args.log_format,
        self_publish=args.self_publish,
        allow_inline_volumes=args.allow_inline_volumes,
        max_inline_size=args.max_inline_size,
    )
