"""(b) and (c): a volume's whole life over gRPC, as a CO drives it.

CreateVolume → ControllerPublishVolume → NodeStageVolume → NodePublishVolume → NodeUnpublishVolume
→ NodeUnstageVolume → ControllerUnpublishVolume → DeleteVolume. The staging directory is made
before the clock starts (the CO makes it); the target is left to the driver, which makes it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil

from bench.harness import Stubs, cap_for
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq


@dataclass
class Volume:
    """What the teardown needs to undo a lifecycle that stopped half-way."""

    volume_id: str = ""
    published: bool = False
    staging: Path | None = None
    staged: bool = False
    target: Path | None = None
    node_published: bool = False


def stepper(steps: dict[str, float]) -> Callable[[str, Callable[[], object]], object]:
    """step(rpc, call): makes the call and records its seconds in steps[rpc]."""

    def step(rpc: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = call()
        steps[rpc] = time.perf_counter() - start
        return result

    return step


def lifecycle(
    stubs: Stubs, work: Path, node_id: str, kind: str, name: str, size: int
) -> dict[str, float]:
    """One volume's life; the seconds of each RPC and "total". Undoes what it did if it fails."""
    cap = cap_for(kind)
    staging = work / "staging" / name
    staging.mkdir(parents=True, exist_ok=True)
    target = work / "pods" / name / ("dev" if kind == "block" else "mount")
    target.parent.mkdir(parents=True, exist_ok=True)  # as the kubelet does
    vol = Volume(staging=staging, target=target)
    steps: dict[str, float] = {}
    step = stepper(steps)
    try:
        created = step(
            "CreateVolume", lambda: stubs.controller.CreateVolume(rq.create_volume(name, cap, size))
        )
        assert isinstance(created, pb.CreateVolumeResponse)
        volume = created.volume
        vol.volume_id = volume.volume_id
        published = step(
            "ControllerPublishVolume",
            lambda: stubs.controller.ControllerPublishVolume(
                rq.controller_publish(vol.volume_id, node_id, cap)
            ),
        )
        assert isinstance(published, pb.ControllerPublishVolumeResponse)
        vol.published = True
        context = dict(published.publish_context)
        step(
            "NodeStageVolume",
            lambda: stubs.node.NodeStageVolume(
                rq.node_stage(vol.volume_id, staging, cap, context, volume.volume_context)
            ),
        )
        vol.staged = True
        step(
            "NodePublishVolume",
            lambda: stubs.node.NodePublishVolume(
                rq.node_publish(vol.volume_id, staging, target, cap, publish_context=context)
            ),
        )
        vol.node_published = True
        teardown(stubs, vol, node_id, step)
    finally:
        with contextlib.suppress(grpc.RpcError):
            teardown(stubs, vol, node_id, None)
        # Only the empty staging directory the CO made goes; anything the driver left behind
        # in pods/ stays for the leak count.
        with contextlib.suppress(OSError):
            staging.rmdir()
        with contextlib.suppress(OSError):
            target.parent.rmdir()
    steps["total"] = sum(steps.values())
    return steps


def teardown(
    stubs: Stubs,
    vol: Volume,
    node_id: str,
    step: Callable[[str, Callable[[], object]], object] | None,
    *,
    delete: bool = True,
) -> None:
    """The second half of the life, timed through step; untimed (a cleanup) when step is None.
    delete=False stops before DeleteVolume."""

    def run(rpc: str, call: Callable[[], object]) -> None:
        if step is None:
            call()
        else:
            step(rpc, call)

    if vol.node_published and vol.target is not None:
        target = str(vol.target)
        run(
            "NodeUnpublishVolume",
            lambda: stubs.node.NodeUnpublishVolume(rq.node_unpublish(vol.volume_id, target)),
        )
        vol.node_published = False
    if vol.staged and vol.staging is not None:
        staging = str(vol.staging)
        run(
            "NodeUnstageVolume",
            lambda: stubs.node.NodeUnstageVolume(rq.node_unstage(vol.volume_id, staging)),
        )
        vol.staged = False
    if vol.published:
        run(
            "ControllerUnpublishVolume",
            lambda: stubs.controller.ControllerUnpublishVolume(
                rq.controller_unpublish(vol.volume_id, node_id)
            ),
        )
        vol.published = False
    if vol.volume_id and delete:
        run(
            "DeleteVolume",
            lambda: stubs.controller.DeleteVolume(rq.delete_volume(vol.volume_id)),
        )
        vol.volume_id = ""


# --- (c) many volumes at once --------------------------------------------------------------------


@dataclass
class RssSampler:
    """Samples a process's resident set size every interval seconds, in a thread."""

    pid: int
    interval: float = 0.02
    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        process = psutil.Process(self.pid)

        def sample() -> None:
            while not self._stop.is_set():
                with contextlib.suppress(psutil.Error):
                    self.samples.append(process.memory_info().rss)
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=sample, name="rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


@dataclass
class ManyResult:
    wall_seconds: float
    totals: list[float]
    errors: list[str]
    rss_peak: int
    rss_samples: int


def many(
    stubs: Stubs,
    work: Path,
    node_id: str,
    kind: str,
    size: int,
    count: int,
    concurrency: int,
    plugin_pid: int,
) -> ManyResult:
    """count volumes through the whole lifecycle, concurrency at a time, while sampling RSS."""
    totals: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        try:
            steps = lifecycle(stubs, work, node_id, kind, f"many-{kind}-{index}", size)
        except grpc.RpcError as exc:
            with lock:
                errors.append(f"{index}: {exc.code().name}: {exc.details()}")
            return
        with lock:
            totals.append(steps["total"])

    with RssSampler(plugin_pid) as rss:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="many") as pool:
            list(pool.map(one, range(count)))
        wall = time.perf_counter() - start
    return ManyResult(wall, totals, errors, rss.peak, len(rss.samples))
