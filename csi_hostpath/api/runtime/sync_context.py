"""The servicer context a sync servicer method sees while it runs on an executor thread.

The servicers are written against grpc's sync ServicerContext: `context.abort` raises, and
`context.code()` then says the call was aborted on purpose (api/status.py). grpc.aio's context
is not theirs to touch from another thread, and its `abort` is a coroutine. This shim answers
from what it copied when the call began (metadata, peer, deadline), records abort, codes and
trailing metadata for the adapter (api/runtime/adapter.py) to apply on the event loop
afterwards, and reaches the loop itself only for what must happen at once (initial metadata).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import grpc


class Aborted(Exception):
    """What `abort` raises on the executor thread; the adapter turns it into the call's status."""


class SyncContext:
    def __init__(self, context: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._context = context
        self._loop = loop
        self._metadata = tuple(context.invocation_metadata() or ())
        self._peer = str(context.peer())
        remaining: float | None = context.time_remaining()
        self._deadline: float | None = None if remaining is None else time.monotonic() + remaining
        self._code: grpc.StatusCode | None = None
        self._details: str | None = None
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    # --- what the adapter reads and drives ----------------------------------------------------

    def finished(self) -> None:
        """The call is over (answered, cancelled or gone): is_active turns False and the
        callbacks run, once."""
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    @property
    def trailing(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    # --- grpc.RpcContext ----------------------------------------------------------------------

    def is_active(self) -> bool:
        return not self._done.is_set()

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def cancel(self) -> None:
        self.abort(grpc.StatusCode.CANCELLED, "cancelled by the server")

    def add_callback(self, callback: Callable[[], None]) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            self._callbacks.append(callback)
            return True

    # --- grpc.ServicerContext -----------------------------------------------------------------

    def invocation_metadata(self) -> tuple[Any, ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> Sequence[bytes] | None:
        return None  # a unix socket without TLS: no authenticated peer

    def peer_identity_key(self) -> str | None:
        return None

    def auth_context(self) -> dict[str, Sequence[bytes]]:
        return {}

    def set_compression(self, compression: grpc.Compression) -> None:
        self._loop.call_soon_threadsafe(self._context.set_compression, compression)

    def send_initial_metadata(self, initial_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        future = asyncio.run_coroutine_threadsafe(
            self._context.send_initial_metadata(tuple(initial_metadata)), self._loop
        )
        future.result()

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._trailing

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        if code == grpc.StatusCode.OK:
            # grpc's own rule: an abort with OK would end the call without a status.
            code = grpc.StatusCode.UNKNOWN
        self._code = code
        self._details = details
        raise Aborted(details)

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        self.set_trailing_metadata(tuple(status.trailing_metadata or ()))
        self.abort(status.code, status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details

    def disable_next_message_compression(self) -> None:
        self._loop.call_soon_threadsafe(self._context.disable_next_message_compression)
