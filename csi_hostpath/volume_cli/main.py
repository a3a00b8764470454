"""Run one parsed `volume` command: dispatch, and the edge where every failure becomes a
message on stderr (and a JSON error under --json) and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TextIO

from csi_hostpath.volume_cli.args import EndpointError, places
from csi_hostpath.volume_cli.cli_errors import CliError
from csi_hostpath.volume_cli.commands_info import list_snapshots, list_volumes, snapshot
from csi_hostpath.volume_cli.commands_mount import mount, unmount
from csi_hostpath.volume_cli.commands_volume import create, delete, expand
from csi_hostpath.volume_cli.context import Context
from csi_hostpath.volume_cli.exit_codes import FAILED, USAGE
from csi_hostpath.volume_cli.output import Output
from csi_hostpath.volume_cli.records import RecordsError

COMMANDS: dict[str, Callable[[Context, argparse.Namespace], int]] = {
    "create": create,
    "mount": mount,
    "unmount": unmount,
    "list": list_volumes,
    "snapshot": snapshot,
    "snapshots": list_snapshots,
    "expand": expand,
    "delete": delete,
}


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one parsed `volume` command; every failure becomes a message and an exit code."""
    output = Output(args.volume_command, args.json, out or sys.stdout, err or sys.stderr)
    try:
        ctx = Context(places(args), output)
    except EndpointError as e:
        output.error(CliError(USAGE, str(e)))
        return USAGE
    try:
        return COMMANDS[args.volume_command](ctx, args)
    except CliError as e:
        output.error(e)
        return e.exit_code
    except RecordsError as e:
        output.error(CliError(FAILED, str(e)))
        return FAILED
    except KeyboardInterrupt:
        output.error(
            CliError(
                130,
                "interrupted; what was done so far is recorded",
                "run the same command again: every step is safe to repeat",
            )
        )
        return 130
    except Exception as e:  # noqa: BLE001 - the edge: a sentence, never a traceback
        output.error(
            CliError(
                FAILED,
                f"unexpected {type(e).__name__}: {e}",
                "run it again; if it keeps failing, report it with the driver's log",
            )
        )
        return FAILED
    finally:
        ctx.close()
