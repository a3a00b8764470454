"""`csi-hostpath volume ...`: the subcommands' arguments, and where the driver and the records
are when no flag says: the same places as `make run` (Makefile: RUN_DIR ?= ./.run,
ENDPOINT ?= unix://$(RUN_DIR)/csi.sock, state in $(RUN_DIR)/state)."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path

from csi_hostpath.core.sizes import QuantityError, parse_quantity, parse_size

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


_LARGE_UNITS = ("k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def typed_size(text: str) -> int:
    """A size typed by a person: core/sizes.py's parse_size, and two refusals on top. A fraction
    of a unit of at least a kilobyte (1.6Gi) is rounded up to a whole byte, as Kubernetes rounds
    it; a fraction of a byte written without one ("100m" is a tenth of a byte: m is milli;
    "1.5") is refused: it is nearly always a unit mistyped or left out. And a size is more than
    0 bytes."""
    text = text.strip()
    exact = parse_quantity(text)
    if exact > 0 and exact.denominator != 1 and not text.endswith(_LARGE_UNITS):
        number = text.removesuffix("m")
        hint = (
            f"; did you mean {number}Mi? (m is milli, a thousandth; Mi is mebibytes, M megabytes)"
            if text.endswith("m")
            else "; give whole bytes, or a unit: 512Mi, 1.6Gi"
        )
        raise QuantityError(
            f"{text[:40]!r} is {float(exact):g} bytes, not a whole number of bytes{hint}"
        )
    size = parse_size(text)
    if size <= 0:
        raise QuantityError(f"{text[:40]!r}: a size must be more than 0 bytes, like 512Mi or 1Gi")
    return size


def size_arg(text: str) -> int:
    try:
        return typed_size(text)
    except QuantityError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@dataclass(frozen=True)
class Places:
    endpoint: str
    run_dir: Path
    pool_dir: Path
    # Nothing pointed at RUN_DIR (no flag, no variable, no .run found): ./.run was a guess.
    guessed: bool = False

    @property
    def records_dir(self) -> Path:
        return self.run_dir / "volume-cli"


class EndpointError(ValueError):
    """An --endpoint that is neither a unix:// URL nor a socket's path."""


def endpoint_url(text: str) -> str:
    """The gRPC target for an endpoint as people write it: unix:///path, or the socket's path
    alone (csi-sanity's --csi.endpoint form), made absolute."""
    if text.startswith("unix:"):
        return text
    path = Path(text)
    if "://" in text or not (path.is_absolute() or path.exists()):
        raise EndpointError(
            f"--endpoint {text[:80]!r} is not a unix:// URL, nor the path of a socket: pass "
            "unix:///path/to/csi.sock or the socket's path"
        )
    return f"unix://{path.absolute()}"


def _made_by_make_run(directory: Path) -> bool:
    return any((directory / n).exists() for n in ("csi.sock", "state", "volume-cli"))


def find_run_dir(start: Path) -> Path | None:
    """The nearest .run that `make run` made, at start or above it (as git finds .git), so a
    command run from a subdirectory of the checkout finds the driver and the records."""
    for directory in (start, *start.parents):
        if _made_by_make_run(directory / ".run"):
            return directory / ".run"
    return None


def run_dir_from(flag: str | None, socket: Path | None = None) -> tuple[Path, bool]:
    """(RUN_DIR, guessed): --run-dir > $CSI_HOSTPATH_RUN_DIR > the directory of the socket
    --endpoint names when `make run` made it > the nearest .run found upwards > ./.run."""
    given = flag or os.environ.get(RUN_DIR_ENV)
    if given:
        return Path(given).absolute(), False
    if socket is not None and _made_by_make_run(socket.parent):
        return socket.parent, False
    found = find_run_dir(Path.cwd())
    return (found, False) if found else (Path(".run").absolute(), True)


RUN_DIR_HELP = (
    f"where `make run` keeps its socket and state (default ${RUN_DIR_ENV}, else the nearest "
    "./.run here or above)"
)


def places(args: argparse.Namespace) -> Places:
    """RUN_DIR (run_dir_from); --endpoint > $CSI_HOSTPATH_ENDPOINT > unix://RUN_DIR/csi.sock;
    the pool (for allocated bytes) is RUN_DIR/state/pool unless --pool-dir says otherwise."""
    given = args.endpoint or os.environ.get(ENDPOINT_ENV)
    endpoint = endpoint_url(given) if given else ""
    socket = Path(endpoint.removeprefix("unix://")) if endpoint.startswith("unix://") else None
    run_dir, guessed = run_dir_from(args.run_dir, socket)
    endpoint = endpoint or f"unix://{run_dir}/csi.sock"
    pool_dir = Path(args.pool_dir).absolute() if args.pool_dir else run_dir / "state" / "pool"
    return Places(endpoint, run_dir, pool_dir, guessed and not given)


def _common(p: argparse.ArgumentParser, below: bool) -> None:
    """The options every subcommand takes, accepted before it too (`volume --json list`). The
    subcommand's copies default to nothing, so a value given before it survives."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if below else value

    p.add_argument(
        "--endpoint",
        default=default(None),
        help=f"the driver's socket: unix:///path.sock or its path (default ${ENDPOINT_ENV}, "
        "else unix://RUN_DIR/csi.sock)",
    )
    p.add_argument(
        "--run-dir",
        default=default(None),
        help=f"{RUN_DIR_HELP}; this command keeps its records in RUN_DIR/volume-cli",
    )
    p.add_argument(
        "--pool-dir",
        default=default(None),
        help="the driver's pool, read for allocated bytes (default RUN_DIR/state/pool)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="one JSON document (docs/volume-cli.md)",
    )


def add_volume_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    volume = sub.add_parser(
        "volume",
        help="local volumes: create, mount, snapshot, expand, delete through the driver",
        description="Speaks CSI to a running driver, in the order Kubernetes does. "
        "Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 busy or in use, 5 no space, "
        "6 driver not running, 7 already exists or mounted.",
    )
    _common(volume, below=False)
    vsub = volume.add_subparsers(dest="volume_command", required=True)

    create = vsub.add_parser("create", help="create a volume (blank, from a snapshot, a clone)")
    create.add_argument("name", type=name_arg)
    create.add_argument("--size", type=size_arg, default=None, help="a quantity: 1Gi, 500Mi")
    create.add_argument(
        "--fs", choices=FS_CHOICES, default=None, help="default ext4, or the source's"
    )
    create.add_argument(
        "--mode",
        choices=MODE_CHOICES,
        default="rwo",
        help="rwo: ReadWriteOnce, rwop: ReadWriteOncePod, rox: ReadOnlyMany (default %(default)s)",
    )
    source = create.add_mutually_exclusive_group()
    source.add_argument("--from-snapshot", default=None, metavar="SNAP")
    source.add_argument("--from-volume", default=None, metavar="VOLUME")
    _common(create, below=True)

    mount = vsub.add_parser("mount", help="make a volume usable at PATH (publish, stage, publish)")
    mount.add_argument("name")
    mount.add_argument("path")
    mount.add_argument("--read-only", action="store_true")
    _common(mount, below=True)

    unmount = vsub.add_parser("unmount", help="the reverse of mount")
    unmount.add_argument("path")
    _common(unmount, below=True)

    lst = vsub.add_parser("list", help="volumes: size, allocated, where mounted, health")
    _common(lst, below=True)

    snap = vsub.add_parser("snapshot", help="snapshot a volume")
    snap.add_argument("name")
    snap.add_argument("snapshot", type=name_arg)
    _common(snap, below=True)

    snaps = vsub.add_parser("snapshots", help="list snapshots")
    _common(snaps, below=True)

    expand = vsub.add_parser("expand", help="grow a volume (online when mounted)")
    expand.add_argument("name")
    expand.add_argument("--size", type=size_arg, required=True)
    _common(expand, below=True)

    delete = vsub.add_parser("delete", help="delete a volume or a snapshot")
    delete.add_argument("name")
    _common(delete, below=True)


# argparse reads "-5Gi" as an option, so `--size -5Gi` failed with "expected one argument"
# instead of saying that a size can't be negative: such a value is joined to its option.
SIZE_OPTIONS = ("--size", "--max-volume-size", "--max-inline-size")
_NEGATIVE = re.compile(r"-[0-9.]")


def join_negative_sizes(argv: list[str]) -> list[str]:
    joined: list[str] = []
    for arg in argv:
        if joined and joined[-1] in SIZE_OPTIONS and _NEGATIVE.match(arg):
            joined[-1] = f"{joined[-1]}={arg}"
        else:
            joined.append(arg)
    return joined
