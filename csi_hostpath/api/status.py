"""The one table from domain errors to gRPC status codes, and the answer a failed call gets from
it. The pipeline every call goes through (api/runtime/pipeline.py) applies it; it stays beside
the servicers because it is their translation too: a domain error in, a CSI code and message
out."""

from __future__ import annotations

from typing import NoReturn

import grpc

from csi_hostpath.api._log import log
from csi_hostpath.core import errors
from csi_hostpath.core.fullness import is_disk_full
from csi_hostpath.system.base import (
    CommandError,
    DeviceNodeError,
    NoSpace,
    ResourceBusy,
    TimedOut,
)

STATUS_OF: dict[type[Exception], grpc.StatusCode] = {
    errors.InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    errors.Unsupported: grpc.StatusCode.INVALID_ARGUMENT,
    errors.VolumeNotFound: grpc.StatusCode.NOT_FOUND,
    errors.SnapshotNotFound: grpc.StatusCode.NOT_FOUND,
    errors.NodeNotFound: grpc.StatusCode.NOT_FOUND,
    errors.Incompatible: grpc.StatusCode.ALREADY_EXISTS,
    errors.CapacityOutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    errors.NoCapacity: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.TopologyUnsatisfiable: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.NodeVolumeLimit: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.PublishedElsewhere: grpc.StatusCode.FAILED_PRECONDITION,
    errors.StillPublished: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NotStaged: grpc.StatusCode.FAILED_PRECONDITION,
    errors.GenerationRevoked: grpc.StatusCode.FAILED_PRECONDITION,
    errors.WrongAccessForVolume: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NodeAlive: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NodeSilent: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NotReady: grpc.StatusCode.FAILED_PRECONDITION,
    errors.TargetBusy: grpc.StatusCode.FAILED_PRECONDITION,
    errors.ForeignMount: grpc.StatusCode.FAILED_PRECONDITION,
    errors.PathDiverted: grpc.StatusCode.FAILED_PRECONDITION,
    errors.OnlineResizeUnavailable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NotImplementedHere: grpc.StatusCode.UNIMPLEMENTED,
    errors.Busy: grpc.StatusCode.ABORTED,
    errors.FreezeTimedOut: grpc.StatusCode.ABORTED,
    errors.BadPageToken: grpc.StatusCode.ABORTED,
    # Not OUT_OF_RANGE: the kubelet takes that as infeasible (NodeResizeInfeasible) and waits
    # for a smaller request, while this one succeeds unchanged once the file has grown; ABORTED
    # (the volume's expansion is still pending) is retried, and is one of the spec's codes.
    errors.NotGrownHere: grpc.StatusCode.ABORTED,
    # Transient, and not final to the kubelet (pkg/volume/csi/csi_client.go, isFinalError): the
    # stage stays uncertain and is retried until the other mount namespace lets go.
    errors.HeldElsewhere: grpc.StatusCode.UNAVAILABLE,
    NoSpace: grpc.StatusCode.RESOURCE_EXHAUSTED,  # NoSpaceLeft (ENOSPC, EDQUOT) too
    # The system layer's typed failures (system/system_errors.py); the rest of them are INTERNAL.
    ResourceBusy: grpc.StatusCode.FAILED_PRECONDITION,
    # No loop-control, a loop node /dev lacks and can't get, or one with another device's
    # numbers: the machine must change first, and the message says how.
    DeviceNodeError: grpc.StatusCode.FAILED_PRECONDITION,
    # A tool that timed out may have done its work: DEADLINE_EXCEEDED is not a final error to the
    # kubelet (kubernetes pkg/volume/csi/csi_client.go, isFinalError), which then treats the
    # mount as uncertain and still tears it down, where INTERNAL would let it forget the mount.
    TimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def status_of(exc: Exception) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        code = STATUS_OF.get(cls)
        if code is not None:
            return code
    if is_disk_full(exc):  # ENOSPC, EDQUOT, sqlite's "database or disk is full"
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    return grpc.StatusCode.INTERNAL


def abort(context: grpc.ServicerContext, name: str, exc: Exception) -> NoReturn:
    code = status_of(exc)
    if code == grpc.StatusCode.INTERNAL:
        if isinstance(exc, CommandError):
            log.error("%s: command failed: %s", name, exc)
            message = f"a system command failed: {exc}"
        else:
            log.exception("%s: unexpected failure", name)
            message = f"unexpected {type(exc).__name__}: {exc}"
    elif is_disk_full(exc) and not isinstance(exc, errors.DriverError):
        log.error("%s: the disk is full: %s", name, exc)
        message = (
            f"the disk is full ({exc}): free space on the filesystem that holds the pool and the "
            "state directory; teardown RPCs still work and free space"
        )
    else:
        message = str(exc)
    context.abort(code, message[:4000])
    raise AssertionError("unreachable: context.abort raises")
