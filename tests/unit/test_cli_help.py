"""What each command's --help says about where it looks: the defaults it states are the ones it
uses."""

from __future__ import annotations

import pytest

from csi_hostpath.cli import main


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal's width


@pytest.mark.parametrize(
    "argv", [("ledger", "list"), ("ledger", "force-detach"), ("ledger", "audit"), ("inspect",)]
)
def test_the_state_dir_default_is_make_runs_first(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    said = _help(capsys, *argv)
    assert "default `make run`'s RUN_DIR/state when there is one here or above" in said, said
