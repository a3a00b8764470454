"""What each command's --help says about where it looks (the defaults it states are the ones it
uses), and the doctor's advice to a `make run` user."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.cli import main
from csi_hostpath.doctor.state import check_socket


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


def test_doctor_says_make_run_for_make_runs_socket(tmp_path: Path) -> None:
    run_dir = tmp_path / ".run"
    found = check_socket(f"unix://{run_dir}/csi.sock", run_dir / "state", daemon_running=False)
    assert found.status == "warn" and "`make run`" in found.fix, found
    assert "csi-hostpath serve" not in found.fix
    elsewhere = check_socket("unix:///csi/csi.sock", Path("/var/lib/x"), daemon_running=False)
    assert "csi-hostpath serve" in elsewhere.fix
