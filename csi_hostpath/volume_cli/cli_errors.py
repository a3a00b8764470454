"""The one error every command failure becomes: what happened, the driver's gRPC status and
message when it came from the driver, and the next step; the gRPC status picks the exit code
(exit_codes.py)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from csi_hostpath.volume_cli.exit_codes import (
    BUSY,
    EXISTS,
    FAILED,
    NO_DRIVER,
    NO_SPACE,
    NOT_FOUND,
    USAGE,
)

_EXIT_OF = {
    grpc.StatusCode.INVALID_ARGUMENT: USAGE,
    grpc.StatusCode.NOT_FOUND: NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION: BUSY,
    grpc.StatusCode.ABORTED: BUSY,
    grpc.StatusCode.RESOURCE_EXHAUSTED: NO_SPACE,
    grpc.StatusCode.OUT_OF_RANGE: NO_SPACE,
    grpc.StatusCode.UNAVAILABLE: NO_DRIVER,
    grpc.StatusCode.DEADLINE_EXCEEDED: NO_DRIVER,
}

_NEXT_OF = {
    grpc.StatusCode.INVALID_ARGUMENT: "fix the arguments the message names",
    grpc.StatusCode.NOT_FOUND: "check the name with `csi-hostpath volume list` or `snapshots`",
    grpc.StatusCode.ALREADY_EXISTS: "pick another name or path, or remove the existing one",
    grpc.StatusCode.FAILED_PRECONDITION: "release what the message names, then run it again",
    grpc.StatusCode.ABORTED: "another operation on it is in flight: run it again in a moment",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "ask for less (`volume list` shows what is used) or "
    "free space in the pool",
    grpc.StatusCode.OUT_OF_RANGE: "ask for a size within the driver's limits",
    grpc.StatusCode.UNAVAILABLE: "start the driver (`make run`) or pass --endpoint",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the driver did not answer in time; check its log",
}


@dataclass
class CliError(Exception):
    exit_code: int
    message: str
    next_step: str = ""
    grpc_code: str = ""  # the driver's status code name, when the driver said it

    def __str__(self) -> str:
        return self.message


def from_rpc(err: grpc.RpcError, what: str, next_step: str = "") -> CliError:
    """A driver's refusal as a CliError: its code picks the exit code and a default next step."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (err.details() if isinstance(err, grpc.Call) else "") or str(err)
    if code in (grpc.StatusCode.UNAVAILABLE,):
        details = f"the driver is not answering ({details})"
    return CliError(
        exit_code=_EXIT_OF.get(code, FAILED),
        message=f"{what}: {details}",
        next_step=next_step or _NEXT_OF.get(code, "see the driver's log for the cause"),
        grpc_code=code.name,
    )
