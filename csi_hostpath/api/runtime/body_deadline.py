"""A call whose request body never arrives is cancelled after BODY_SECONDS.

grpc dispatches a unary call when its headers arrive; the body may follow, or never come. Each
unary method is therefore served as stream-unary (api/runtime/adapter.py): the coroutine runs on the
headers and reads the one request itself, under a deadline. Waiting costs no thread, only the
call's own small state, and the deadline bounds how long a stalled client keeps even that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from csi_hostpath.api._log import log
from csi_hostpath.api.status import status_of
from csi_hostpath.core import errors

# A client writes a unary call's body with its headers; seconds later it never comes.
BODY_SECONDS = 5.0


async def read_body(context: Any, method: str, seconds: float) -> Any:
    """The call's one request message; else the call is ended with a status and this raises:
    CANCELLED when the body is `seconds` late (the client then sees RST_STREAM), UNIMPLEMENTED
    for a call with no message, INVALID_ARGUMENT for one that is not the method's message."""
    try:
        request = await asyncio.wait_for(context.read(), seconds)
    except TimeoutError:
        log.warning(
            "cancelled a %s call: its request body did not arrive within %.0f s", method, seconds
        )
        await context.abort(
            grpc.StatusCode.CANCELLED,
            f"the request body did not arrive within {seconds:.0f} s",
        )
    if request is grpc.aio.EOF:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, f"{method} requires exactly one request message"
        )
    if isinstance(request, Unparsed):
        bad = errors.InvalidRequest(f"the request is not a valid message: {request}")
        await context.abort(status_of(bad), str(bad))
    return request


class Unparsed(str):
    """A request body that is not the method's message, answered INVALID_ARGUMENT by read_body
    with the reason, where a failure inside grpc's own deserializer would end the call with no
    word of what was wrong."""


def parse_or_unparsed(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse_it(body: bytes) -> Any:
        try:
            return parse(body)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and whatever else it raises
            return Unparsed(e)

    return parse_it
