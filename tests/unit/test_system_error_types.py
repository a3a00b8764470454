"""The system layer's error types: chosen from errno, mapped to status codes in one table.

The system layer's error types: chosen from errno or how a tool ended, and mapped to status
codes in the one table (api/status.py)."""

from __future__ import annotations

import errno
import os

import grpc
import pytest

from csi_hostpath.api.status import status_of
from csi_hostpath.system import system_errors as e
from csi_hostpath.system.runner import run
from csi_hostpath.system.system_errors import CommandError, command_error, syscall_error


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.EBUSY, e.ResourceBusy),
        (errno.EPERM, e.NotPermitted),
        (errno.EACCES, e.NotPermitted),
        (errno.ENOENT, e.NotFound),
        (errno.ENXIO, e.NotFound),
        (errno.ENODEV, e.NotFound),
        (errno.EROFS, e.ReadOnly),
        (errno.ENOSPC, e.NoSpaceLeft),
        (errno.EDQUOT, e.NoSpaceLeft),
    ],
)
def test_the_type_follows_errno(code: int, kind: type[CommandError]) -> None:
    error = command_error(["mount", "x"], 32, "", "whatever the tool says", errno=code)
    assert type(error) is kind and error.errno == code and error.returncode == 32
    assert "whatever the tool says" in str(error)


def test_without_errno_the_words_do_not_type_it() -> None:
    error = command_error(["umount", "/x"], 32, "", "umount: /x: target is busy.")
    assert type(error) is CommandError and error.errno is None


def test_a_refused_system_call_keeps_its_errno() -> None:
    error = syscall_error("umount2", "/x", OSError(errno.EBUSY, "busy", "/x"))
    assert isinstance(error, e.ResourceBusy) and error.errno == errno.EBUSY
    assert error.argv == ["umount2", "/x"] and error.returncode is None
    assert str(error) == f"umount2 /x failed: {os.strerror(errno.EBUSY)}"


def test_no_space_from_a_tool_is_no_space() -> None:
    assert isinstance(command_error(["mkfs"], 1, "", "", errno=errno.ENOSPC), e.NoSpace)


def test_runner_types_what_it_knows() -> None:
    with pytest.raises(e.NotFound) as missing:
        run(["csihp-no-such-tool-anywhere"])
    assert missing.value.errno == errno.ENOENT and missing.value.returncode == 127
    with pytest.raises(e.TimedOut):
        run(["sleep", "5"], timeout=0.2)
    with pytest.raises(e.ResourceBusy) as busy:
        run(["sh", "-c", "exit 32"], errno=errno.EBUSY)
    assert busy.value.returncode == 32
    with pytest.raises(CommandError) as plain:
        run(["sh", "-c", "echo device is busy >&2; exit 32"])
    assert type(plain.value) is CommandError


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (command_error(["umount2", "/x"], None, "", "", errno=errno.EBUSY), "FAILED_PRECONDITION"),
        (command_error(["mkfs"], 1, "", "", errno=errno.ENOSPC), "RESOURCE_EXHAUSTED"),
        (e.TimedOut(["mkfs.xfs"], None, "", ""), "DEADLINE_EXCEEDED"),
        (command_error(["x"], 1, "", "", errno=errno.EPERM), "INTERNAL"),
        (CommandError(["x"], 1, "", "busy"), "INTERNAL"),
        # No loop-control, or a loop node that is another device's: the machine must change.
        (
            e.DeviceNodeError("/dev/loop-control does not exist: `modprobe loop`"),
            "FAILED_PRECONDITION",
        ),
    ],
)
def test_one_table_maps_them(error: e.SystemError_, code: str) -> None:
    assert status_of(error) == getattr(grpc.StatusCode, code)
