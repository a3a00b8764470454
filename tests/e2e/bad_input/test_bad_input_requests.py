"""Hostile requests to every RPC get a spec code, and the driver lives and touches nothing else.

Every request message of the Identity, Controller and Node services is generated from its
protobuf descriptor (request_strategies.py). For every example: the answer is a status code of
the spec (never UNKNOWN, never INTERNAL), the process is still alive, no mount appeared or vanished
outside the work directory, and nothing was created at a path the request named outside it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import message as pb_message
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import event, given

from tests.e2e.bad_input.fuzz_target import (
    METHODS,
    RPC_TIMEOUT,
    SERVICES,
    SPEC_CODES,
    Target,
    fuzz_settings,
)
from tests.e2e.bad_input.request_strategies import Strategies

C = grpc.StatusCode


def _strings(msg: pb_message.Message) -> Iterator[str]:
    """Every string a request carries, map keys included."""
    for f, value in msg.ListFields():
        values = value if f.is_repeated else [value]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            for k, v in value.items():
                yield str(k)
                if isinstance(v, str):
                    yield v
                elif isinstance(v, pb_message.Message):
                    yield from _strings(v)
            continue
        for v in values:
            if isinstance(v, str):
                yield v
            elif isinstance(v, pb_message.Message):
                yield from _strings(v)


def _outside_candidates(t: Target, request: pb_message.Message) -> dict[str, bool]:
    """Each path outside the work directory that a string of the request could name (as given,
    normalised, or relative to the driver's working directory), and whether it exists now."""
    inside = str(t.root) + "/"
    found: dict[str, bool] = {}
    for s in _strings(request):
        if not s or "\x00" in s or len(s) > 4096:
            continue
        for p in {s, os.path.normpath(s), os.path.normpath(os.path.join(t.cwd, s))}:
            if not p.startswith(inside) and p not in found:
                found[p] = os.path.lexists(p)
    return found


WATCHED_DIRS = ("/", "/etc")


def _listing() -> dict[str, set[str]]:
    return {d: set(os.listdir(d)) for d in WATCHED_DIRS}


def _check_one(t: Target, method: MethodDescriptor, request: pb_message.Message) -> None:
    before = _outside_candidates(t, request)
    listing = _listing()
    stub = getattr(t.client, SERVICES[method.containing_service.name])
    code, details = C.OK, ""
    try:
        getattr(stub, method.name)(request, timeout=RPC_TIMEOUT)
    except grpc.RpcError as e:
        code, details = e.code(), e.details() or ""
    event(
        code.name + " " + details[:50]
    )  # --hypothesis-show-statistics shows how deep the examples got
    assert t.alive(), f"the driver died on {method.name}:\n{t.log()}"
    assert code in SPEC_CODES, (
        f"{method.name} answered {code.name}: {details[:2000]}\nrequest:\n{str(request)[:3000]}"
    )
    created = [p for p, existed in before.items() if not existed and os.path.lexists(p)]
    assert not created, f"{method.name} created {created} outside its work directory"
    assert _listing() == listing, f"{method.name} changed {WATCHED_DIRS}"
    now = t.mounts()
    # Only the driver's doing counts: a mount another process's cleanup detached is forgotten.
    t.mounts_outside -= {row for row in t.mounts_outside - now if t.gone_elsewhere(row)}
    assert now == t.mounts_outside, (
        f"{method.name} changed the mounts outside its work directory: "
        f"+{now - t.mounts_outside} -{t.mounts_outside - now}"
    )


@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_hostile_requests_get_spec_codes_only(fresh: Target, method: MethodDescriptor) -> None:
    strategy = Strategies(fresh.seed, method.name, fresh.mounted_inside).request(method.input_type)

    @fuzz_settings(fresh.examples)
    @given(request=strategy)
    def one(request: pb_message.Message) -> None:
        _check_one(fresh, method, request)

    one()
