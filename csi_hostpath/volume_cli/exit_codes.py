"""The exit codes scripts can rely on (docs/volume-cli.md). Standard library only: `run-dir`
and the operator commands use them too, and `make clean-volumes` runs without the venv."""

from __future__ import annotations

OK = 0
FAILED = 1  # anything else: the driver failed (INTERNAL, UNKNOWN, UNIMPLEMENTED, ...)
USAGE = 2  # bad arguments or a request the driver calls invalid (INVALID_ARGUMENT)
NOT_FOUND = 3  # no such volume, snapshot or mount (NOT_FOUND)
BUSY = 4  # in use or another operation in flight (FAILED_PRECONDITION, ABORTED)
NO_SPACE = 5  # the pool can't hold it (RESOURCE_EXHAUSTED, OUT_OF_RANGE)
NO_DRIVER = 6  # nothing answers on the endpoint (UNAVAILABLE, DEADLINE_EXCEEDED)
EXISTS = 7  # the name is taken or the path is already mounted (ALREADY_EXISTS)

EXIT_CODES = {
    OK: "ok",
    FAILED: "failed",
    USAGE: "usage",
    NOT_FOUND: "not found",
    BUSY: "busy or in use",
    NO_SPACE: "no space",
    NO_DRIVER: "driver not running",
    EXISTS: "already exists or already mounted",
}
