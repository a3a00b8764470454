"""The operator commands and `csi-hostpath volume` agree on exit codes and on finding the driver.

The operator commands and `csi-hostpath volume` agree: one exit code for "no driver found",
and `demo` finds `make run`'s driver as the volume command does."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.cli import build_parser, main
from csi_hostpath.volume_cli.exit_codes import NO_DRIVER


@pytest.mark.parametrize(
    "argv", [("ledger", "list"), ("ledger", "audit"), ("inspect", "v"), ("node", "list")]
)
def test_no_state_exits_as_the_volume_command_does_without_a_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    assert main([*argv, "--state-dir", str(tmp_path / "none")]) == NO_DRIVER
    assert "no driver state" in capsys.readouterr().err


def test_demo_needs_no_endpoint_flag() -> None:
    args = build_parser().parse_args(["demo"])
    assert args.endpoint is None
