"""Copies run on a bounded pool of their own, apart from the RPC threads.

A snapshot or a clone copies a whole backing file, which can take minutes. Run on a gRPC worker,
a few of them at once would hold every worker and starve ControllerPublish, NodeStage and the rest
(Probe has its own pool, api/runtime/lanes.py). So CreateSnapshot, and CreateVolume from a
snapshot or a volume, hand their work to this pool and wait for it only:

- while a waiting slot is free (a quarter of the RPC workers): the other RPC workers can never
  all be tied up waiting for copies;
- and at most `max_wait` seconds, or less than the caller's own deadline.

A call that stops waiting answers ABORTED ("still copying"); the copy goes on. The CO retries with
the same arguments (external-provisioner counts ABORTED as not final, `isFinalError` in
pkg/controller/controller.go; external-snapshotter requeues a failed CreateSnapshot with backoff),
and the retry waits on the same job, found by its key, instead of starting another; an identical
call while another is waiting answers ABORTED at once (the spec's "operation pending"). A job that
has finished is forgotten: a later retry runs the call again, which the service answers from its
records (the same snapshot or volume by name), so a result is never served from a stale cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any, TypeVar

from csi_hostpath.core.errors import Busy

T = TypeVar("T")

MAX_WAIT_SECONDS = 30.0
# Below the caller's deadline by this much, so the answer reaches it before it gives up.
DEADLINE_MARGIN_SECONDS = 0.5
STILL_COPYING = "still copying"


@dataclass(eq=False)
class _Job:
    future: futures.Future[Any]
    waited: bool  # a caller is waiting for it right now


class CopyPool:
    def __init__(self, rpc_workers: int, max_wait: float = MAX_WAIT_SECONDS) -> None:
        self.copy_workers = max(2, rpc_workers // 4)
        self._pool = futures.ThreadPoolExecutor(self.copy_workers, thread_name_prefix="copy")
        self._waiters = threading.BoundedSemaphore(max(1, rpc_workers // 4))
        # More jobs than this queued or running: new ones are refused until some finish.
        self._max_jobs = 8 * self.copy_workers
        self.max_wait = max_wait
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}

    def run(self, key: str, what: str, work: Callable[[], T], deadline: float | None) -> T:
        """work()'s result, if it is done in time; else Busy (ABORTED) while it goes on.
        deadline: the seconds the caller has left (None: no deadline)."""
        job = self._job(key, what, work)
        if not self._waiters.acquire(blocking=False):
            self._stop_waiting(job)
            raise Busy(
                f"{what}: {STILL_COPYING} in the background (every waiting slot is taken by "
                "other copies); retry with the same request"
            )
        try:
            wait = self.max_wait
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - DEADLINE_MARGIN_SECONDS))
            result: T = job.future.result(timeout=wait)
            return result
        except futures.TimeoutError:
            raise Busy(
                f"{what}: {STILL_COPYING} in the background after {wait:.0f}s; retry with the "
                "same request"
            ) from None
        finally:
            self._waiters.release()
            self._stop_waiting(job)

    def _job(self, key: str, what: str, work: Callable[[], T]) -> _Job:
        """The job for key, with this caller as its one waiter."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                if job.waited:
                    # The spec's "operation pending" (Concurrency): one caller waits per job.
                    raise Busy(
                        f"{what}: an identical call is already waiting for this copy, "
                        f"{STILL_COPYING}; retry later"
                    )
                job.waited = True
                return job
            if len(self._jobs) >= self._max_jobs:
                raise Busy(
                    f"{what}: {len(self._jobs)} copies are queued or running, the most this "
                    "driver takes at once; retry later"
                )
            job = _Job(self._pool.submit(work), waited=True)
            self._jobs[key] = job
        job.future.add_done_callback(lambda _: self._forget(key, job))
        return job

    def _stop_waiting(self, job: _Job) -> None:
        with self._lock:
            job.waited = False

    def _forget(self, key: str, job: _Job) -> None:
        with self._lock:
            if self._jobs.get(key) is job:
                del self._jobs[key]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
