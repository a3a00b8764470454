"""The kubectl plugin's errors: one line and the next step, its exit code, JSON under -o json.

A kubeconfig that is a directory or garbage, a --request-timeout the client can't take, and a
command line argparse refuses: never a traceback, never a validation dump, and with `-o json`
a JSON document on stdout a script can read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from csi_hostpath.why.command import READ_FAILED, USAGE, run

GOOD = """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
"""


def _kubeconfig(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _cases(tmp_path: Path) -> list[tuple[list[str], int, str]]:
    good = _kubeconfig(tmp_path, "good", GOOD)
    return [
        (["--kubeconfig", str(tmp_path)], READ_FAILED, "a directory, not a kubeconfig file"),
        (
            ["--kubeconfig", str(_kubeconfig(tmp_path, "words", "just some words\n"))],
            READ_FAILED,
            "not a kubeconfig",
        ),
        (
            ["--kubeconfig", str(_kubeconfig(tmp_path, "binary", b"\x00\xff\xfe{[:"))],
            READ_FAILED,
            "not a kubeconfig",
        ),
        (["--kubeconfig", str(good), "--request-timeout", "0"], USAGE, "above 0, not '0'"),
        (["--kubeconfig", str(good), "--request-timeout", "nan"], USAGE, "above 0"),
        (["--kubeconfig", str(good), "--no-such-flag"], USAGE, "unrecognized arguments"),
    ]


@pytest.mark.parametrize("index", range(6))
def test_an_error_is_one_line_with_its_next_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], index: int
) -> None:
    argv, code, said = _cases(tmp_path)[index]
    assert run(["why", "pod/web", *argv]) == code
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 2, out.err
    assert lines[0].startswith("kubectl csi-hostpath why: ") and said in lines[0], out.err
    assert lines[1].startswith("  next: ")
    assert "Traceback" not in out.err and "validation error" not in out.err


@pytest.mark.parametrize("index", range(6))
def test_under_o_json_an_error_is_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], index: int
) -> None:
    argv, code, said = _cases(tmp_path)[index]
    assert run(["why", "pod/web", "-o", "json", *argv]) == code
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["schema"] == "csi-hostpath.why/v1" and doc["exit_code"] == code
    assert said in doc["error"]["message"] and doc["error"]["next"]
    assert out.err == ""
