"""api/runtime/copy_pool.py without a server: one job per key, ABORTED instead of a long wait.

api/runtime/copy_pool.py without a server: one job per key, ABORTED (Busy) instead of a long
wait, the retry collects the same job's result, an identical call while one waits is ABORTED at
once, errors reach the caller, finished jobs are forgotten."""

from __future__ import annotations

import threading
import time

import pytest

from csi_hostpath.api.runtime.copy_pool import STILL_COPYING, CopyPool
from csi_hostpath.core.errors import Busy, VolumeNotFound


def test_a_slow_job_answers_busy_and_the_retry_collects_the_same_job() -> None:
    pool = CopyPool(4, max_wait=0.05)
    release, runs = threading.Event(), []

    def work() -> str:
        runs.append(1)
        release.wait(10)
        return "made"

    with pytest.raises(Busy, match=STILL_COPYING):
        pool.run("k", "CreateSnapshot", work, None)
    with pytest.raises(Busy, match=STILL_COPYING):
        pool.run("k", "CreateSnapshot", work, None)
    release.set()
    pool.max_wait = 10
    assert pool.run("k", "CreateSnapshot", work, None) == "made"
    assert len(runs) == 1, "a retry waits on the running job instead of starting another"
    pool.shutdown()


def test_waiting_slots_are_bounded_and_the_deadline_is_kept() -> None:
    pool = CopyPool(4, max_wait=10)  # one waiting slot
    release, started = threading.Event(), threading.Event()

    def first() -> bool:
        started.set()
        return release.wait(10)

    waiting = threading.Thread(target=lambda: pool.run("a", "first", first, None))
    waiting.start()
    try:
        assert started.wait(10)
        deadline = time.monotonic() + 10
        while pool._waiters._value != 0:  # the first caller takes the only slot
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(Busy, match="already waiting"):  # "operation pending"
            pool.run("a", "first again", first, None)
        with pytest.raises(Busy, match="every waiting slot"):
            pool.run("b", "second", lambda: True, None)
    finally:
        release.set()
        waiting.join(10)
    held = threading.Event()
    with pytest.raises(Busy, match=STILL_COPYING):
        pool.run("c", "third", lambda: held.wait(10), 0.1)  # the caller has 0.1 s left
    held.set()
    pool.shutdown()


def test_errors_reach_the_caller_and_finished_jobs_are_forgotten() -> None:
    pool = CopyPool(4)

    def fails() -> None:
        raise VolumeNotFound("gone")

    with pytest.raises(VolumeNotFound):
        pool.run("k", "CreateVolume", fails, None)
    assert pool.run("k", "CreateVolume", lambda: "again", None) == "again"
    pool.shutdown()
