"""Every refusal of an expansion, the code it gets, and what Kubernetes does with that code.

KEP-1790 (recovery from expansion failure): the external-resizer (pkg/util/util.go,
IsInfeasibleError) and the kubelet (pkg/volume/csi/expander.go, isInfeasibleError) take
INVALID_ARGUMENT, OUT_OF_RANGE and NOT_FOUND as infeasible (the claim's allocatedResourceStatuses
becomes ControllerResizeInfeasible / NodeResizeInfeasible, and the user may ask for less); the
kubelet takes FAILED_PRECONDITION from NodeExpandVolume as "not while in use" and tries again at
the next mount; every other code is retried. A refusal is infeasible only where a smaller request
(or none) is the fix. docs/design.md's expansion table says the same."""

from __future__ import annotations

import grpc
import pytest

from csi_hostpath.api.status import status_of
from csi_hostpath.core import errors

C = grpc.StatusCode
INFEASIBLE = {C.INVALID_ARGUMENT, C.OUT_OF_RANGE, C.NOT_FOUND}

# (refusal, the error raised, its code, whether asking for less would fix it)
REFUSALS = [
    ("no capacity_range", errors.InvalidRequest("x"), C.INVALID_ARGUMENT, True),
    ("required above limit", errors.CapacityOutOfRange("x"), C.OUT_OF_RANGE, True),
    ("past --max-volume-size", errors.CapacityOutOfRange("x"), C.OUT_OF_RANGE, True),
    ("growth past the pool's room", errors.CapacityOutOfRange("x"), C.OUT_OF_RANGE, True),
    ("a limit below the size (a shrink)", errors.CapacityOutOfRange("x"), C.OUT_OF_RANGE, True),
    ("unknown volume", errors.VolumeNotFound("x"), C.NOT_FOUND, False),
    ("a snapshot (its freeze) in progress", errors.Busy("x"), C.ABORTED, False),
    ("node: the device holds less than asked", errors.NotGrownHere("x"), C.ABORTED, False),
    ("node: no loop device (not staged)", errors.NotStaged("x"), C.FAILED_PRECONDITION, False),
    ("node: online ext4 without CAP_SYS_RESOURCE", errors.OnlineResizeUnavailable("x"),
     C.FAILED_PRECONDITION, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("why", "exc", "code", "less_helps"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_each_expansion_refusal_has_its_code(
    why: str, exc: Exception, code: grpc.StatusCode, less_helps: bool
) -> None:
    assert status_of(exc) == code, why
    if code != C.NOT_FOUND:  # the spec's code for a missing volume, whatever Kubernetes does
        assert (code in INFEASIBLE) == less_helps, why
