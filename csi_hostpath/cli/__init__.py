"""The command line: the parser (parser.py), the entry point (main.py), and the operator's
commands (operator.py)."""

from csi_hostpath.cli.main import main
from csi_hostpath.cli.parser import DEFAULT_STATE_DIR, build_parser, config_from_args

__all__ = ["DEFAULT_STATE_DIR", "build_parser", "config_from_args", "main"]
