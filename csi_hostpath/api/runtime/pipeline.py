"""The one pipeline every call of a CSI servicer goes through, applied by the adapter
(api/runtime/adapter.py) to every method handler, so no servicer method opens any of it.

In order, around the servicer's own method:

1. the request's REQUIRED fields (api/runtime/required.py) and its size limits and text rules
   (api/runtime/limits.py), before the method runs;
2. the scope of the call's mount lookups: where the kernel can't name one mount (no statmount(2)),
   the lookups inside share one read of mountinfo (the system's Mounts.shared_lookups);
3. for a teardown (TEARDOWNS, below), the disk-full retry: when the call fails because the disk
   is full, the reserved headroom is given back and the call runs once more
   (service/teardown.py);
4. the error mapping: anything raised becomes the call's status through api/status.py's table,
   by context.abort, never an empty reply with a code.

Around that, the adapter reads the body under its deadline, queues the call on its lane
(api/runtime/lanes.py) and writes the call's log line (api/runtime/rpc_log.py), which only it
can: it sees when the body arrived, how long the call queued, and the calls that never reach a
servicer (dropped while queued, the health service).

A server stream's steps run on whichever executor thread is free, so a stream gets the checks
and the error mapping but no lookup scope (a scope is its thread's) and no retry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import grpc

from csi_hostpath.api import status
from csi_hostpath.api.runtime import limits, required
from csi_hostpath.service.teardown import retry_when_full
from csi_hostpath.store.headroom import Headroom
from csi_hostpath.system.base import System

# The teardowns: each does its system step before its commit and is idempotent, so a second run
# after the headroom is given back finds the system step done and needs only room to commit.
TEARDOWNS = frozenset(
    {
        "/csi.v1.Node/NodeUnpublishVolume",
        "/csi.v1.Node/NodeUnstageVolume",
        "/csi.v1.Controller/ControllerUnpublishVolume",
        "/csi.v1.Controller/DeleteVolume",
    }
)

Unary = Callable[[Any, grpc.ServicerContext], Any]
Stream = Callable[[Any, grpc.ServicerContext], Iterator[Any]]


class Pipeline:
    def __init__(self, system: System | None = None, headroom: Headroom | None = None) -> None:
        self.system = system  # whose mount lookups a call's scope shares
        self.headroom = headroom  # given back when a teardown finds the disk full

    def _scope(self) -> AbstractContextManager[None]:
        if self.system is None:
            return nullcontext()
        return self.system.mounts.shared_lookups()

    def unary(self, method: str, inner: Unary) -> Unary:
        """inner, the servicer's method for the full method path, run through the pipeline."""
        name = method.rsplit("/", 1)[-1]
        headroom = self.headroom if method in TEARDOWNS else None

        def piped(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                required.check(request)
                limits.check(request)
                with self._scope():
                    return retry_when_full(headroom, lambda: inner(request, context))
            except Exception as exc:  # the edge: everything becomes a status
                if context.code() is not None:  # already aborted deliberately; let it through
                    raise
                status.abort(context, name, exc)

        return piped

    def stream(self, method: str, inner: Stream) -> Stream:
        """inner, a server-streaming method (a generator), with the checks and the error
        mapping: an error raised before or between messages ends the stream with its status,
        never with a silent end of stream."""
        name = method.rsplit("/", 1)[-1]

        def piped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                required.check(request)
                limits.check(request)
                yield from inner(request, context)
            except Exception as exc:  # the edge: everything becomes a status
                if context.code() is not None:
                    raise
                status.abort(context, name, exc)

        return piped
