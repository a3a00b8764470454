"""The system layer's failures, typed by what went wrong: busy, not permitted, not found, no
space, read-only, timed out.

The type comes from the kernel's errno (a system call's, or the one the fast path got before it
handed the call to a tool) or from how the tool ended (timed out, not found), never from the
text a tool printed: messages change with versions and locales, errno does not. The api layer
maps these types to status codes in its one table (api/status.py).
"""

from __future__ import annotations

import errno as errnos
import os
from collections.abc import Sequence


class SystemError_(Exception):
    """Base of every failure the system layer reports on purpose."""

    # The kernel's errno when it told us one; None when only a tool's exit status is known.
    errno: int | None = None


class NoSpace(SystemError_):
    """The pool filesystem has no room for the requested allocation."""


class DeviceNodeError(SystemError_):
    """A device node the driver needs can't be had: the kernel has no such device (no loop
    driver), the node can't be made in /dev, or the node there is another device's. The message
    names the node and says what to do."""


class CommandError(SystemError_):
    """A tool or a system call failed or timed out; carries everything needed to explain why.

    A system call shows as argv ``[call, path]`` with no returncode and its errno.
    """

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int | None,
        stdout: str,
        stderr: str,
        *,
        errno: int | None = None,
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.errno = errno
        if returncode is not None:
            what = f"exited {returncode}"
        elif errno is not None:
            what = "failed"
        else:
            what = "timed out"
        detail = stderr.strip() or stdout.strip()
        if errno is not None and os.strerror(errno) not in detail:
            detail = f"{detail} ({os.strerror(errno)})" if detail else os.strerror(errno)
        super().__init__(f"{' '.join(self.argv)} {what}: {detail}")


class ResourceBusy(CommandError):
    """EBUSY: a process or a mount holds what the call wanted free."""


class NotPermitted(CommandError):
    """EPERM or EACCES: the plugin lacks a privilege (a capability, a permission)."""


class NotFound(CommandError):
    """ENOENT, ENXIO or ENODEV, or a tool that is not installed."""


class ReadOnly(CommandError):
    """EROFS: the filesystem or device is read-only."""


class NoSpaceLeft(CommandError, NoSpace):
    """ENOSPC or EDQUOT from a tool or a system call."""


class TimedOut(CommandError):
    """A tool did not finish within its timeout."""


_KIND_OF_ERRNO: dict[int, type[CommandError]] = {
    errnos.EBUSY: ResourceBusy,
    errnos.EPERM: NotPermitted,
    errnos.EACCES: NotPermitted,
    errnos.ENOENT: NotFound,
    errnos.ENXIO: NotFound,
    errnos.ENODEV: NotFound,
    errnos.EROFS: ReadOnly,
    errnos.ENOSPC: NoSpaceLeft,
    errnos.EDQUOT: NoSpaceLeft,
}


def command_error(
    argv: Sequence[str],
    returncode: int | None,
    stdout: str,
    stderr: str,
    *,
    errno: int | None = None,
) -> CommandError:
    """The CommandError of the type errno says; a plain CommandError when errno is unknown."""
    kind = CommandError if errno is None else _KIND_OF_ERRNO.get(errno, CommandError)
    return kind(argv, returncode, stdout, stderr, errno=errno)


def syscall_error(call: str, path: str, exc: OSError) -> CommandError:
    """A refused system call as a typed CommandError, errno kept."""
    return command_error([call, path], None, "", "", errno=exc.errno)
