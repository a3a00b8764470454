"""The driver's gRPC server: grpc.aio on an event loop of its own thread, driven from sync code.

The rest of the driver is sync (the CLI, the background loops, the tests' fixtures), so this
class gives grpc.aio's server the sync face of grpc.Server that they use: add a servicer,
add_insecure_port, start, stop. Each servicer is registered through api/runtime/adapter.py,
which serves its sync methods, through the call pipeline, from the executors of
api/runtime/lanes.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from csi_hostpath.api.runtime.adapter import Adapter
from csi_hostpath.api.runtime.lanes import Lanes, server_options
from csi_hostpath.api.runtime.pipeline import Pipeline
from csi_hostpath.api.runtime.rpc_log import RpcLog

T = TypeVar("T")
# How long a call from a sync thread into the loop may take before it is given up: the loop
# only ever runs short steps, so this is reached only when the loop is gone.
LOOP_CALL_SECONDS = 30.0


class _Captured:
    """Stands in for a server in a generated add_*Servicer_to_server, to take its handlers."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come by name below

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.services[service] = dict(handlers)


class AioServer:
    def __init__(self, lanes: Lanes, rpc_log: RpcLog, pipeline: Pipeline) -> None:
        self.lanes = lanes
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="grpc-loop", daemon=True
        )
        self._thread.start()
        self._stopped = False
        self._server: Any = self.call(self._build())
        self._adapter = Adapter(lanes, rpc_log, self._loop, pipeline)

    @staticmethod
    async def _build() -> Any:
        # Made on the loop: grpc.aio binds a server to the loop it is made on.
        return grpc.aio.server(options=server_options())

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run coroutine on the loop and wait for its result, from any other thread."""
        if not self._loop.is_running():
            coroutine.close()
            raise RuntimeError("the gRPC server's event loop has stopped")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(LOOP_CALL_SECONDS)

    def add_servicer(self, add_to_server: Callable[[Any, Any], None], servicer: Any) -> None:
        """add_to_server: a generated add_*Servicer_to_server function."""
        captured = _Captured()
        add_to_server(servicer, captured)
        for service, handlers in captured.services.items():
            wrapped = {
                name: self._adapter.wrap(handler, f"/{service}/{name}")
                for name, handler in handlers.items()
            }
            self._server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service, wrapped),)
            )

    def add_insecure_port(self, address: str) -> int:
        async def bind() -> int:
            return int(self._server.add_insecure_port(address))

        return self.call(bind())

    def start(self) -> None:
        self.call(self._server.start())

    def stop(self, grace: float) -> None:
        """Refuse new calls, let those in flight finish for up to grace seconds, then cancel
        them; drop the calls still queued and give running ones grace seconds more; stop the
        loop. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.call(self._server.stop(grace))
        finally:
            self.lanes.shutdown(grace)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=LOOP_CALL_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()


class Health:
    """The standard gRPC health service, asyncio itself, so Check answers on the loop whatever
    the executors are doing; set from sync code."""

    def __init__(self, server: AioServer) -> None:
        self._server = server
        self.servicer = health.aio.HealthServicer()
        server.add_servicer(health_pb2_grpc.add_HealthServicer_to_server, self.servicer)

    def set(self, service: str, status: Any) -> None:
        self._call(self.servicer.set(service, status))

    def enter_graceful_shutdown(self) -> None:
        self._call(self.servicer.enter_graceful_shutdown())

    def _call(self, coroutine: Coroutine[Any, Any, None]) -> None:
        try:
            self._server.call(coroutine)
        except (RuntimeError, futures.TimeoutError):
            coroutine.close()  # the loop is gone: the server has stopped, nobody asks any more
