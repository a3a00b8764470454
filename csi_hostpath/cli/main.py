"""`csi-hostpath`: parse the command line, set up logging, and hand each command to its module."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence

from csi_hostpath.cli.parser import build_parser, config_from_args


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body)


class OneLineFormatter(logging.Formatter):
    """key=value lines, one per record: a message carrying text from a request (a name, an ID, a
    path) has its control characters escaped, so it can't print a line that looks like another
    record. A traceback still follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        from csi_hostpath.core.request_text import shown

        message = record.message
        record.message = shown(message, LOG_CHARS)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message


# A log line is not cut short for anything the driver itself writes.
LOG_CHARS = 65536


def setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else OneLineFormatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    )
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
    # grpc's asyncio layer logs a line for every call at DEBUG ("Loaded running loop"), which
    # would double the driver's own debug log; their warnings and errors still come through.
    for chatty in ("grpc._cython.cygrpc", "asyncio"):
        logging.getLogger(chatty).setLevel(max(logging.INFO, getattr(logging, level)))


def main(argv: Sequence[str] | None = None) -> int:
    from csi_hostpath.volume_cli.args import join_negative_sizes

    args = build_parser().parse_args(
        join_negative_sizes(list(sys.argv[1:] if argv is None else argv))
    )
    if args.command == "serve":
        setup_logging(args.log_level, args.log_format)
        try:
            config = config_from_args(args)
            config.socket_path  # noqa: B018 - validates the endpoint before anything starts
        except ValueError as e:
            print(f"csi-hostpath: {e}", file=sys.stderr)
            return 2
        from csi_hostpath.daemon.endpoint import EndpointRefused
        from csi_hostpath.daemon.server import StateDirLocked, serve
        from csi_hostpath.store.backing.owner import PoolClaimRefused
        from csi_hostpath.store.db import StateUnreadable

        try:
            return serve(config)
        except (StateDirLocked, EndpointRefused, PoolClaimRefused, StateUnreadable) as e:
            print(f"csi-hostpath: {e}", file=sys.stderr)
            return 1
    if args.command in ("registrar", "livenessprobe"):
        # klog's --v: 4 and above log every call, as upstream's sidecars do at that level.
        setup_logging("DEBUG" if args.v >= 4 else "INFO")
        if args.command == "registrar":
            from csi_hostpath.sidecars import registrar

            return registrar.run(args)
        from csi_hostpath.sidecars import livenessprobe

        return livenessprobe.run(args)
    setup_logging("WARNING")
    # The operator's commands, imported here: `serve` never loads doctor/ or the ledger's.
    from csi_hostpath.cli.operator import (
        demo_main,
        doctor_main,
        inspect_main,
        ledger_main,
        state_dirs,
    )

    if args.command == "doctor":
        return doctor_main(args)
    if args.command == "demo":
        return demo_main(args)
    if args.command == "inspect":
        return inspect_main(args)
    if args.command == "volume":
        from csi_hostpath.volume_cli.main import run

        return run(args)
    if args.command == "node":
        from csi_hostpath.cli.node_cmd import run as node_run

        return node_run(args, state_dirs)
    if args.command == "run-dir":
        from csi_hostpath.cli.run_dir import run as run_dir_run
        from csi_hostpath.volume_cli.args import run_dir_from

        return run_dir_run(args, run_dir_from(args.run_dir)[0])
    if args.command == "state":
        from csi_hostpath.cli.state_cmd import rebuild

        return rebuild(*state_dirs(args), args.take_over)
    return ledger_main(args)
