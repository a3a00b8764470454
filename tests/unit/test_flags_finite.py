"""Safety flags must be finite numbers: the parser's and the ledger's rules.

Safety flags must be finite numbers. `nan` compares false with everything, so
`age < nan` said "the node is gone" for a live node, and `--heartbeat-interval nan` spun a loop."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from csi_hostpath import cli
from csi_hostpath.core import errors, ledger_rules
from csi_hostpath.core.model import AccessMode, AccessType, Publication

BAD_FLOATS = ["nan", "NaN", "inf", "-inf", "infinity", "0", "-1"]
FLOAT_FLAGS = ["--fence-interval", "--heartbeat-interval", "--node-grace"]


def _serve(*extra: str) -> list[str]:
    return ["serve", "--endpoint", "unix:///tmp/x.sock", *extra]


@pytest.mark.parametrize("flag", FLOAT_FLAGS)
@pytest.mark.parametrize("value", BAD_FLOATS)
def test_serve_refuses_non_finite_intervals(flag: str, value: str) -> None:
    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(_serve(f"{flag}={value}"))
    assert e.value.code == 2


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_serve_refuses_non_positive_workers(value: str) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(_serve(f"--workers={value}"))


def test_good_values_still_parse() -> None:
    args = cli.build_parser().parse_args(_serve("--node-grace", "1.5", "--workers", "4"))
    assert args.node_grace == 1.5 and args.workers == 4


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_ledger_force_detach_refuses_nan_grace_on_the_command_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ledger", "force-detach", "vol-x", "--node", "a", "--reason", "r"]
    argv += ["--state-dir", str(tmp_path), f"--node-grace={value}"]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "finite" in capsys.readouterr().err


def _publication() -> Publication:
    return Publication(
        "vol-" + "a" * 32, "node-a", AccessMode.SINGLE_NODE_WRITER, AccessType.MOUNT, False, 1, 0.0
    )


@pytest.mark.parametrize("grace", [math.nan, math.inf, 0.0, -1.0])
def test_force_detach_decision_refuses_a_grace_that_is_not_a_finite_positive_number(
    grace: float,
) -> None:
    # The heartbeat is 1 s old: the node is alive. A nan grace used to let this through.
    with pytest.raises(errors.NodeAlive):
        ledger_rules.decide_force_detach(_publication(), 1.0, grace, accept_data_loss=False)


def test_force_detach_decision_still_allows_a_silent_node() -> None:
    ledger_rules.decide_force_detach(_publication(), 120.0, 60.0, accept_data_loss=False)
    ledger_rules.decide_force_detach(_publication(), 1.0, math.nan, accept_data_loss=True)
