"""Loop devices under concurrency, on the real kernel: one thread's detach must never break
another thread's attach, find or list (a device in rundown refuses opens with ENXIO)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from csi_hostpath.system.base import System
from csi_hostpath.system.linux import linux_system
from tests.system.conftest import Env, real_unavailable

pytestmark = pytest.mark.real
ROUNDS = 40


@pytest.fixture
def real_env(work_dir: Path, tag_prefix: str) -> Env:
    reason = real_unavailable()
    if reason is not None:
        pytest.fail(f"this test needs the real kernel: {reason}")
    pool = work_dir / "pool"
    pool.mkdir()
    return Env("real", linux_system(pool), work_dir, tag_prefix, None)


def test_attach_detach_find_list_race_cleanly(real_env: Env) -> None:
    system: System = real_env.system
    errors: list[BaseException] = []
    stop = threading.Event()

    def cycle(n: int) -> None:
        backing = real_env.work / "pool" / f"race-{n}.img"
        system.pool.create(backing, 8 << 20)
        tag = f"{real_env.tag_prefix}race{n}"
        try:
            for _ in range(ROUNDS):
                device = system.loop.attach(Path(backing), tag)
                assert system.loop.find(tag) is not None
                system.loop.detach(device.path)
        except BaseException as e:
            errors.append(e)

    def scan() -> None:
        try:
            while not stop.is_set():
                system.loop.list(real_env.tag_prefix)
                system.loop.find(f"{real_env.tag_prefix}none")
        except BaseException as e:
            errors.append(e)

    scanners = [threading.Thread(target=scan) for _ in range(2)]
    workers = [threading.Thread(target=cycle, args=(n,)) for n in range(4)]
    for t in scanners + workers:
        t.start()
    for t in workers:
        t.join(120)
    stop.set()
    for t in scanners:
        t.join(30)
    assert not errors, errors
    assert system.loop.list(real_env.tag_prefix) == []
