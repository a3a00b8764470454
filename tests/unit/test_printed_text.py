"""Text from a request is printed escaped, on its own line, by every command and log line.

`ledger list`, `ledger audit`, `inspect`, `volume list`'s table and the driver's log lines. New
names with a control character are refused at the edge (test_request_limits.py); these
tests put one into the state as an older driver stored it, and read it back through the CLI."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from csi_hostpath.cli.main import OneLineFormatter, main
from csi_hostpath.volume_cli.output import table
from csi_hostpath.volume_cli.records import CSI_NAME_PREFIX
from tests.conftest import Client
from tests.support import helpers as h

FORGED = "innocent\n2026-12-07 19:52:00  operator force-detach vol-" + "0" * 32


def _rename(state: Path, volume_id: str, name: str) -> None:
    """The name an older driver took and stored as it came."""
    db = sqlite3.connect(state / "state.db")
    try:
        with db:
            db.execute("UPDATE volumes SET name = ? WHERE volume_id = ?", (name, volume_id))
    finally:
        db.close()


def _held_volume(client: Client, workdir: Path, name: str) -> tuple[Path, str]:
    cap = h.mount_cap()
    volume = h.create(client, "plain", cap, size=h.MiB)
    h.publish(client, volume.volume_id, "node-a", cap)
    state = workdir / "f-state"
    _rename(state, volume.volume_id, name)
    return state, volume.volume_id


def _lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def test_a_name_with_a_newline_forges_no_audit_row(
    fake_driver: Client, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, volume_id = _held_volume(fake_driver, workdir, FORGED)
    force = ["ledger", "force-detach", volume_id, "--node", "node-a", "--state-dir", str(state)]
    assert main([*force, "--reason", "gone\nfor good", "--i-accept-data-loss"]) == 0
    lines = _lines(capsys, "ledger", "audit", "--state-dir", str(state))
    assert not any(line.startswith("2026-12-07 19:52:00") for line in lines), lines
    rows = lines[1:]
    assert all(volume_id in row for row in rows), rows
    assert any("innocent\\n2026-12-07" in row and "gone\\nfor good" in row for row in rows)


def test_ledger_list_prints_a_huge_name_cut_on_one_line(
    fake_driver: Client, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, volume_id = _held_volume(fake_driver, workdir, "x" * 100_000 + "\nforged")
    lines = _lines(capsys, "ledger", "list", "--state-dir", str(state))
    assert len(lines) == 2, lines
    assert volume_id in lines[1] and len(lines[1]) < 600
    assert lines[1].endswith("...(100007 chars)")


def test_inspect_keeps_a_name_to_its_line(
    fake_driver: Client, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, volume_id = _held_volume(fake_driver, workdir, CSI_NAME_PREFIX + "a\nFORGED")
    lines = _lines(capsys, "inspect", volume_id, "--state-dir", str(state))
    assert not any(line.startswith("FORGED") for line in lines), lines
    assert any("a\\nFORGED" in line for line in lines), lines


def test_volume_list_table_keeps_each_row_to_a_line() -> None:
    printed = table(["name", "size"], [["a\nb\x1b[2J", "1Mi"]])
    assert printed.splitlines() == ["NAME         SIZE", "a\\nb\\x1b[2J  1Mi"]


def test_a_log_line_from_a_request_is_one_line() -> None:
    formatter = OneLineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "CreateVolume %r", (FORGED,), None)
    assert "\n" not in formatter.format(record)
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "name %s", (FORGED,), None)
    assert formatter.format(record).startswith("INFO name innocent\\n2026-12-07")
