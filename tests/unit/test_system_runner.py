"""The one subprocess runner: argv in, stdout out, CommandError for everything else."""

from __future__ import annotations

import logging

import pytest

from csi_hostpath.system.base import CommandError
from csi_hostpath.system.runner import missing_tools, run

EXIT_CODE = 3
SHELL_NOT_FOUND = 127  # what a shell answers for a missing command; the runner reuses it


def test_returns_stdout() -> None:
    assert run(["echo", "hello world"]) == "hello world\n"


def test_passes_input() -> None:
    assert run(["cat"], input="from stdin") == "from stdin"


def test_stdin_is_closed_without_input() -> None:
    assert run(["cat"], timeout=5) == ""


def test_no_shell_interpretation() -> None:
    assert run(["echo", "$HOME; rm -rf /"]) == "$HOME; rm -rf /\n"


def test_failure_carries_everything() -> None:
    with pytest.raises(CommandError) as failed:
        run(["sh", "-c", f"echo out; echo err >&2; exit {EXIT_CODE}"])
    error = failed.value
    assert error.argv == ["sh", "-c", f"echo out; echo err >&2; exit {EXIT_CODE}"]
    assert error.returncode == EXIT_CODE
    assert error.stdout == "out\n"
    assert error.stderr == "err\n"
    assert f"exited {EXIT_CODE}" in str(error)
    assert "err" in str(error)


def test_timeout_is_a_command_error_without_returncode() -> None:
    with pytest.raises(CommandError) as timed_out:
        run(["sh", "-c", "echo started; exec sleep 10"], timeout=0.5)
    assert timed_out.value.returncode is None
    assert "timed out" in str(timed_out.value)


def test_missing_tool_is_a_command_error() -> None:
    with pytest.raises(CommandError) as missing:
        run(["csihp-no-such-tool-anywhere"])
    assert missing.value.returncode == SHELL_NOT_FOUND


def test_messages_are_in_the_c_locale() -> None:
    assert run(["sh", "-c", "echo $LC_ALL"]) == "C\n"


def test_logs_argv_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="csi_hostpath.system"):
        run(["true"])
    assert "['true']" in caplog.text


def test_missing_tools() -> None:
    assert missing_tools(["sh", "csihp-no-such-tool-anywhere"]) == ["csihp-no-such-tool-anywhere"]
    assert missing_tools([]) == []
