"""A unary call whose request body never arrives is cancelled after BODY_SECONDS.

grpcio dispatches a unary call on its headers and then holds a worker thread, with no deadline
of its own, until the body comes: a client that sends headers and stalls would hold that worker
for as long as its connection lives. Served as stream-unary instead, the behavior runs before the
body is read and gets the call's context, so one watchdog thread can cancel a call whose first
message is late, and the worker goes back to its pool.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from csi_hostpath.api._log import log
from csi_hostpath.api.status import status_of
from csi_hostpath.core import errors

# A client writes a unary call's body with its headers; seconds later it never comes.
BODY_SECONDS = 5.0

Unary = Callable[[Any, grpc.ServicerContext], Any]


class BodyWatchdog:
    """Cancels each registered call still waiting for its body at its deadline. Every deadline is
    now + a constant, so they expire in the order they were registered."""

    def __init__(self, seconds: float = BODY_SECONDS) -> None:
        self.seconds = seconds
        self._waiting: OrderedDict[int, tuple[float, str, grpc.ServicerContext]] = OrderedDict()
        self._tokens = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="body-watchdog", daemon=True)
        self._thread.start()

    def wait_for(self, method: str, context: grpc.ServicerContext) -> int:
        token = next(self._tokens)
        with self._cond:
            self._waiting[token] = (time.monotonic() + self.seconds, method, context)
            if len(self._waiting) == 1:
                self._cond.notify()
        return token

    def arrived(self, token: int) -> None:
        with self._cond:
            self._waiting.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if not self._waiting:
                    self._cond.wait()
                    continue
                token, (deadline, method, context) = next(iter(self._waiting.items()))
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                del self._waiting[token]
                log.warning(
                    "cancelled a %s call: its request body did not arrive within %.0f s",
                    method,
                    self.seconds,
                )
                context.cancel()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)


class BodyThenUnary:
    """The stream-unary behavior that reads the one request under the watchdog, then runs the
    unary behavior. `experimental_thread_pool` picks the executor grpc runs it on (None: the
    server's own)."""

    def __init__(self, inner: Unary, method: str, watchdog: BodyWatchdog, pool: Any) -> None:
        self._inner = inner
        self._method = method
        self._watchdog = watchdog
        self.experimental_thread_pool = pool

    def __call__(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        token = self._watchdog.wait_for(self._method, context)
        try:
            # Cancelled (by the watchdog or the client), this raises grpc's own RpcError, which
            # grpc knows as its own: it then neither logs it nor sends a status.
            request = next(requests, None)
        finally:
            self._watchdog.arrived(token)
        if request is None:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{self._method} requires exactly one request message",
            )
        if isinstance(request, Unparsed):
            bad = errors.InvalidRequest(f"the request is not a valid message: {request}")
            context.abort(status_of(bad), str(bad))
        return self._inner(request, context)


class Unparsed(str):
    """A request body that is not the method's message. Refused by the behavior: when grpc's own
    deserializer fails, the call lingers until a garbage collection and holds its stream, and past
    the cap those refuse every later call on that connection."""


def _parse_or_unparsed(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse_it(body: bytes) -> Any:
        try:
            return parse(body)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and whatever else it raises
            return Unparsed(e)

    return parse_it


def with_body_deadline(
    handler: grpc.RpcMethodHandler, method: str, watchdog: BodyWatchdog, pool: Any = None
) -> grpc.RpcMethodHandler:
    return grpc.stream_unary_rpc_method_handler(
        BodyThenUnary(handler.unary_unary, method, watchdog, pool),
        request_deserializer=_parse_or_unparsed(handler.request_deserializer)
        if handler.request_deserializer is not None
        else None,
        response_serializer=handler.response_serializer,
    )
