"""The one way this driver runs an external command.

Every tool call goes through :func:`run`, so every call has an argv list (never a shell), a timeout,
and a typed :class:`CommandError` that says what ran and what it printed. The type comes from how
the tool ended (TimedOut; NotFound or NotPermitted when it could not even start, from exec's
errno), or from the kernel's errno a caller passes in, never from the tool's words.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence

from csi_hostpath.system._log import log
from csi_hostpath.system.system_errors import TimedOut, command_error

# The return code a shell reports for a command it cannot find; reused so callers see one kind of
# failure whether the tool is missing or fails.
_NOT_FOUND = 127


def _env() -> dict[str, str]:
    # A fixed C locale keeps the tools' messages in English, so that logs and error text are the
    # same on every node whatever its locale.
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    return env


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def run(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    input: str | None = None,
    errno: int | None = None,
) -> str:
    """Run argv and return its stdout; raise CommandError on a non-zero exit or a timeout.

    errno: what the kernel answered when the caller tried the same thing with a system call
    first; a failure of the tool is then typed by it (the tool's exit status can't say why).
    """
    args = [str(arg) for arg in argv]
    if not args:
        raise ValueError("run() needs a command")
    log.debug("run: %s", args)
    try:
        # stdin from /dev/null unless there is input: a tool that decides to ask a question
        # fails instead of waiting for an answer until the timeout.
        proc = subprocess.run(
            args,
            stdin=subprocess.DEVNULL if input is None else None,
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
            env=_env(),
        )
    except subprocess.TimeoutExpired as exc:
        raise TimedOut(args, None, _text(exc.stdout), _text(exc.stderr)) from exc
    except OSError as exc:
        # Tool missing or not executable: report it as a failed command, not a bare OSError,
        # so callers handle one error type for "the tool did not do its job".
        raise command_error(args, _NOT_FOUND, "", str(exc), errno=exc.errno) from exc
    if proc.returncode != 0:
        raise command_error(args, proc.returncode, proc.stdout, proc.stderr, errno=errno)
    return proc.stdout


def missing_tools(names: Iterable[str]) -> list[str]:
    """The tools among names that cannot be found on PATH (for readiness checks)."""
    return [name for name in names if shutil.which(name) is None]
