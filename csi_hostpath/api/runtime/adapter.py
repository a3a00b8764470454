"""The sync servicers served by grpc.aio: each method handler becomes a coroutine that reads the
request under the body deadline, then runs the servicer's own sync method, through the call
pipeline (api/runtime/pipeline.py), on its executor (api/runtime/lanes.py) with a context shim
(api/runtime/sync_context.py), writes the call's log line, and answers on the event loop. This is
the one place every handler is wrapped.

A call costs a thread only while its method runs. Until then it is a coroutine waiting for its
body (at most BODY_SECONDS) or for a thread (in the executor's FIFO queue, as long as its client
waits). A call whose client gives up while it is still queued is dropped from the queue and
never runs; one already running finishes, as a sync method can't be interrupted.

Handlers that are coroutines already (the gRPC health service) run on the loop itself.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from csi_hostpath.api._log import log
from csi_hostpath.api.runtime.body_deadline import BODY_SECONDS, parse_or_unparsed, read_body
from csi_hostpath.api.runtime.lanes import Lanes
from csi_hostpath.api.runtime.pipeline import Pipeline
from csi_hostpath.api.runtime.rpc_log import RpcLog
from csi_hostpath.api.runtime.sync_context import Aborted, SyncContext

_OK = grpc.StatusCode.OK


@dataclass
class _Outcome:
    """What a sync method came to, carried from its thread to the loop."""

    response: Any = None
    code: grpc.StatusCode | None = None  # set: end the call with this status
    details: str = ""
    finished: bool = False  # a stream's end


def _failure(shim: SyncContext, method: str, exc: BaseException) -> _Outcome:
    if isinstance(exc, Aborted):
        return _Outcome(code=shim.code() or grpc.StatusCode.UNKNOWN, details=shim.details() or "")
    # grpc's own answer to an exception a method let out: the code it set, else UNKNOWN.
    code = shim.code()
    if code in (None, _OK):  # set_code and raise is a deliberate answer (UNIMPLEMENTED stubs)
        log.error("%s: the servicer raised %s", method, type(exc).__name__, exc_info=exc)
    return _Outcome(
        code=code if code not in (None, _OK) else grpc.StatusCode.UNKNOWN,
        details=shim.details() or f"Exception calling application: {exc}",
    )


def _returned(shim: SyncContext, response: Any) -> _Outcome:
    code = shim.code()
    if code not in (None, _OK):  # set_code and return: the sync server answers that status
        return _Outcome(code=code, details=shim.details() or "")
    return _Outcome(response=response)


class Adapter:
    def __init__(
        self,
        lanes: Lanes,
        rpc_log: RpcLog,
        loop: asyncio.AbstractEventLoop,
        pipeline: Pipeline,
        body_seconds: float = BODY_SECONDS,
    ) -> None:
        self._lanes = lanes
        self._pipeline = pipeline
        self._log = rpc_log
        self._loop = loop
        self._body_seconds = body_seconds

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler that serves method in place of handler. Unary requests are read by the
        behavior itself (stream-unary, stream-stream), so the body deadline applies."""
        parse = handler.request_deserializer
        options = {
            "request_deserializer": parse_or_unparsed(parse) if parse is not None else None,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.unary_unary, method), **options
            )
        if handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._server_stream(handler.unary_stream, method), **options
            )
        return handler  # request streams: CSI has none

    # --- unary responses -----------------------------------------------------------------------

    def _unary(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(inner):

            async def on_loop(requests: Any, context: Any) -> Any:
                request = await read_body(context, method, self._body_seconds)
                arrived = time.perf_counter()
                code = "OK"
                try:
                    return await inner(request, context)
                except BaseException:
                    code = getattr(context.code(), "name", None) or "CANCELLED"
                    raise
                finally:
                    self._log.record(method, request, code, time.perf_counter() - arrived, 0.0)

            return on_loop

        executor = self._lanes.executor_for(method)
        inner = self._pipeline.unary(method, inner)

        async def on_executor(requests: Any, context: Any) -> Any:
            request = await read_body(context, method, self._body_seconds)
            arrived = time.perf_counter()
            shim = self._shim(context)

            def call() -> _Outcome:
                started = time.perf_counter()
                outcome = _Outcome()
                try:
                    outcome = _returned(shim, inner(request, shim))
                except Exception as exc:  # noqa: BLE001 - every failure becomes the call's status
                    outcome = _failure(shim, method, exc)
                finally:
                    code = outcome.code.name if outcome.code is not None else "OK"
                    ended = time.perf_counter()
                    self._log.record(method, request, code, ended - arrived, started - arrived)
                return outcome

            def dropped() -> None:
                waited = time.perf_counter() - arrived
                self._log.record(method, request, "CANCELLED", waited, waited)

            outcome = await self._queued(executor, call, dropped)
            return await self._answer(context, shim, outcome)

        return on_executor

    # --- server streams ------------------------------------------------------------------------

    def _server_stream(self, inner: Callable[..., Any], method: str) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(inner):  # writes with context.write (health Watch)

            async def on_loop(requests: Any, context: Any) -> None:
                request = await read_body(context, method, self._body_seconds)
                await inner(request, context)

            return on_loop
        if inspect.isasyncgenfunction(inner):

            async def yielded_on_loop(requests: Any, context: Any) -> AsyncIterator[Any]:
                request = await read_body(context, method, self._body_seconds)
                async for response in inner(request, context):
                    yield response

            return yielded_on_loop

        executor = self._lanes.executor_for(method)
        inner = self._pipeline.stream(method, inner)

        async def on_executor(requests: Any, context: Any) -> AsyncIterator[Any]:
            """Each message of the sync generator made on the executor, written from the loop:
            a slow reader holds no thread while the next message waits for its window."""
            request = await read_body(context, method, self._body_seconds)
            arrived = time.perf_counter()
            shim = self._shim(context)
            messages: Iterator[Any] = inner(request, shim)  # a generator: nothing runs yet
            started: list[float] = []
            code = "CANCELLED"

            def step() -> _Outcome:
                if not started:
                    started.append(time.perf_counter())
                try:
                    return _Outcome(response=next(messages))
                except StopIteration:
                    return _Outcome(finished=True)
                except Exception as exc:  # noqa: BLE001 - every failure becomes the call's status
                    return _failure(shim, method, exc)

            try:
                while True:
                    outcome = await self._queued(executor, step)
                    if outcome.code is not None:
                        code = outcome.code.name
                        await self._answer(context, shim, outcome)
                    if outcome.finished:
                        code = "OK"
                        break
                    yield outcome.response
            finally:
                ended = time.perf_counter()
                queued = (started[0] if started else ended) - arrived
                self._log.record(method, request, code, ended - arrived, queued)

        return on_executor

    # --- the parts both share ------------------------------------------------------------------

    def _shim(self, context: Any) -> SyncContext:
        shim = SyncContext(context, self._loop)
        context.add_done_callback(lambda _: shim.finished())
        return shim

    async def _queued(
        self,
        executor: futures.Executor,
        work: Callable[[], _Outcome],
        dropped: Callable[[], None] | None = None,
    ) -> _Outcome:
        """work's outcome, once a thread of executor has run it. Cancelled while it is still
        queued (its client gave up, or the server stops), it is dropped and never runs."""
        job = executor.submit(work)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if job.cancel() and dropped is not None:
                dropped()
            raise

    async def _answer(self, context: Any, shim: SyncContext, outcome: _Outcome) -> Any:
        if shim.trailing:
            context.set_trailing_metadata(shim.trailing)
        if outcome.code is not None:
            await context.abort(outcome.code, outcome.details)
        return outcome.response
