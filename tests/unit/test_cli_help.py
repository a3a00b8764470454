"""Each command's --help states the defaults it uses.

What each command's --help says about where it looks (the defaults it states are the ones it
uses), that every option with a default states it, and the doctor's advice to a `make run`
user."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi_hostpath.cli import build_parser, main
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


def _options(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """Every option of parser and of its subcommands, each named by its command line."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            yield path, action


def _spellings(default: object) -> list[str]:
    """How a help text may state a default: as argparse would print it; an empty string as
    empty; a whole number of seconds also as a Go duration (the sidecars' flags: 1s)."""
    if default == "":
        return ['""', "empty"]
    said = [str(default)]
    if isinstance(default, float) and default.is_integer():
        said += [str(int(default)), f"{int(default)}s"]
    return said


def test_every_option_with_a_default_says_it_in_its_help() -> None:
    parser = build_parser()
    formatter = parser._get_formatter()
    unsaid = []
    for path, action in _options(parser, "csi-hostpath"):
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS:
            continue
        # From the word "default" on; a value's spelling must stand alone (60 is not 600).
        said = formatter._expand_help(action) if action.help else ""
        tail = said[said.find("default") :] if "default" in said else ""
        if not any(
            re.search(rf"(?<![\w.]){re.escape(s)}(?!\w|\.\d)", tail) for s in _spellings(default)
        ):
            unsaid.append(f"{path} {'/'.join(action.option_strings)} (default {default!r}): {said}")
    assert unsaid == [], "\n".join(unsaid)
