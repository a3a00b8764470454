"""`csi-hostpath volume ...`: the subcommands' arguments, and where the driver and the records
are when no flag says: the same places as `make run` (Makefile: RUN_DIR ?= ./.run,
ENDPOINT ?= unix://$(RUN_DIR)/csi.sock, state in $(RUN_DIR)/state)."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.volume_cli.quantity import QuantityError, parse_size

ENDPOINT_ENV = "CSI_HOSTPATH_ENDPOINT"
RUN_DIR_ENV = "CSI_HOSTPATH_RUN_DIR"
FS_CHOICES = ("ext4", "xfs", "block")
MODE_CHOICES = ("rwo", "rwop", "rox")
# Names become part of CSI names and of file names in the records: keep them plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def name_arg(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:70]!r} is not a name: use letters, digits, '.', '_' or '-' (up to 63), "
            "starting with a letter or digit"
        )
    return text


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except QuantityError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@dataclass(frozen=True)
class Places:
    endpoint: str
    run_dir: Path
    pool_dir: Path

    @property
    def records_dir(self) -> Path:
        return self.run_dir / "volume-cli"


def run_dir_from(flag: str | None) -> Path:
    """--run-dir > $CSI_HOSTPATH_RUN_DIR > ./.run."""
    return Path(flag or os.environ.get(RUN_DIR_ENV) or ".run").absolute()


RUN_DIR_HELP = (
    f"where `make run` keeps its socket and state (default ${RUN_DIR_ENV}, else ./.run)"
)


def places(args: argparse.Namespace) -> Places:
    """RUN_DIR (run_dir_from); --endpoint > $CSI_HOSTPATH_ENDPOINT > unix://RUN_DIR/csi.sock;
    the pool (for allocated bytes) is RUN_DIR/state/pool unless --pool-dir says otherwise."""
    run_dir = run_dir_from(args.run_dir)
    endpoint = args.endpoint or os.environ.get(ENDPOINT_ENV) or f"unix://{run_dir}/csi.sock"
    pool_dir = Path(args.pool_dir).absolute() if args.pool_dir else run_dir / "state" / "pool"
    return Places(endpoint, run_dir, pool_dir)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--endpoint",
        default=None,
        help=f"the driver's unix:// socket (default ${ENDPOINT_ENV}, else unix://RUN_DIR/csi.sock)",
    )
    p.add_argument(
        "--run-dir",
        default=None,
        help=f"{RUN_DIR_HELP}; this command keeps its records in RUN_DIR/volume-cli",
    )
    p.add_argument(
        "--pool-dir",
        default=None,
        help="the driver's pool, read for allocated bytes (default RUN_DIR/state/pool)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document (docs/volume-cli.md)")


def add_volume_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    volume = sub.add_parser(
        "volume",
        help="local volumes: create, mount, snapshot, expand, delete through the driver",
        description="Speaks CSI to a running driver, in the order Kubernetes does. "
        "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 busy or in use, 5 no space, "
        "6 driver not running, 7 already exists or mounted.",
    )
    vsub = volume.add_subparsers(dest="volume_command", required=True)

    create = vsub.add_parser("create", help="create a volume (blank, from a snapshot, a clone)")
    create.add_argument("name", type=name_arg)
    create.add_argument("--size", type=size_arg, default=None, help="a quantity: 1Gi, 500Mi")
    create.add_argument(
        "--fs", choices=FS_CHOICES, default=None, help="default ext4, or the source's"
    )
    create.add_argument("--mode", choices=MODE_CHOICES, default="rwo")
    source = create.add_mutually_exclusive_group()
    source.add_argument("--from-snapshot", default=None, metavar="SNAP")
    source.add_argument("--from-volume", default=None, metavar="VOLUME")
    _common(create)

    mount = vsub.add_parser("mount", help="make a volume usable at PATH (publish, stage, publish)")
    mount.add_argument("name")
    mount.add_argument("path")
    mount.add_argument("--read-only", action="store_true")
    _common(mount)

    unmount = vsub.add_parser("unmount", help="the reverse of mount")
    unmount.add_argument("path")
    _common(unmount)

    lst = vsub.add_parser("list", help="volumes: size, allocated, where mounted, health")
    _common(lst)

    snap = vsub.add_parser("snapshot", help="snapshot a volume")
    snap.add_argument("name")
    snap.add_argument("snapshot", type=name_arg)
    _common(snap)

    snaps = vsub.add_parser("snapshots", help="list snapshots")
    _common(snaps)

    expand = vsub.add_parser("expand", help="grow a volume (online when mounted)")
    expand.add_argument("name")
    expand.add_argument("--size", type=size_arg, required=True)
    _common(expand)

    delete = vsub.add_parser("delete", help="delete a volume or a snapshot")
    delete.add_argument("name")
    _common(delete)
