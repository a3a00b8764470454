"""What `csi-hostpath volume` and the operator commands make of their arguments.

What `csi-hostpath volume` and the operator commands make of their arguments, before any
driver is asked: sizes that are not whole bytes, negative sizes, endpoints written as paths,
options before the subcommand, and where `make run`'s directory is when no flag says."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from csi_hostpath.cli import DEFAULT_STATE_DIR, build_parser, main
from csi_hostpath.cli.lookup import state_dir
from csi_hostpath.core.sizes import QuantityError
from csi_hostpath.volume_cli.args import EndpointError, places, typed_size


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CSI_HOSTPATH_ENDPOINT", raising=False)
    monkeypatch.delenv("CSI_HOSTPATH_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("100m", "did you mean 100Mi?"),  # milli: a tenth of a byte, not 100 MiB
        ("1.5", "give whole bytes, or a unit"),
        ("1e-3", "give whole bytes, or a unit"),
    ],
)
def test_a_fraction_of_a_byte_is_refused_with_a_hint(text: str, hint: str) -> None:
    with pytest.raises(QuantityError, match="not a whole number of bytes") as refused:
        typed_size(text)
    assert hint in str(refused.value)


def test_a_negative_size_is_called_negative(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["volume", "create", "x", "--size", "-5Gi"])
    assert usage.value.code == 2
    assert "a size can't be negative" in capsys.readouterr().err


def _volume(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["volume", *argv])


def test_the_common_options_go_before_the_subcommand_too() -> None:
    before = _volume("--endpoint", "unix:///a.sock", "--json", "--run-dir", "/r", "list")
    after = _volume("list", "--endpoint", "unix:///a.sock", "--json", "--run-dir", "/r")
    for args in (before, after):
        assert (args.endpoint, args.json, args.run_dir) == ("unix:///a.sock", True, "/r")
    assert _volume("list").json is False
    ledger = build_parser().parse_args(["ledger", "--state-dir", "/s", "list"])
    assert ledger.state_dir == Path("/s")


def test_an_endpoint_may_be_the_sockets_path(tmp_path: Path) -> None:
    assert places(_volume("list", "--endpoint", "/x/csi.sock")).endpoint == "unix:///x/csi.sock"
    (tmp_path / "here.sock").touch()
    assert places(_volume("list", "--endpoint", "here.sock")).endpoint == (
        f"unix://{tmp_path}/here.sock"
    )
    with pytest.raises(EndpointError, match="not a unix:// URL"):
        places(_volume("list", "--endpoint", "foo"))
    with pytest.raises(EndpointError, match="not a unix:// URL"):
        places(_volume("list", "--endpoint", "dns:///x:1"))


def _make_run_dir(root: Path) -> Path:
    run = root / ".run"
    (run / "state").mkdir(parents=True)
    (run / "state" / "state.db").touch()
    return run


def test_make_runs_directory_is_found_from_below_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nothing = places(_volume("list"))
    assert nothing.guessed and nothing.run_dir == tmp_path / ".run"
    assert state_dir(None, DEFAULT_STATE_DIR) == Path(DEFAULT_STATE_DIR)

    run = _make_run_dir(tmp_path)
    below = tmp_path / "src" / "deep"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    found = places(_volume("list"))
    assert (found.run_dir, found.guessed) == (run, False)
    assert found.endpoint == f"unix://{run}/csi.sock"
    # The operator commands find the same state `volume` does.
    assert state_dir(None, DEFAULT_STATE_DIR) == run / "state"
    assert state_dir(Path("/given"), DEFAULT_STATE_DIR) == Path("/given")


def test_the_records_are_the_ones_beside_the_socket_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _make_run_dir(tmp_path / "checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    p = places(_volume("list", "--endpoint", f"{run}/csi.sock"))
    assert p.run_dir == run and p.records_dir == run / "volume-cli"
