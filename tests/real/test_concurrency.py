"""Many calls at once, on one connection or each on its own: every one is queued and served.

The sidecars each send many calls at once over one connection (external-provisioner runs 100
workers), and the kubelet dials the driver for each operation. On a real driver process with
real loop devices, mkfs and mounts, 256 calls at once, a mix of Probe, CreateVolume of new
names, NodeStageVolume and NodePublishVolume of distinct volumes, all answer OK: none is
refused UNAVAILABLE (a stream past a per-connection cap) or RESOURCE_EXHAUSTED (a server-wide
cap of calls in flight). The teardown of every volume, each of its steps sent for all volumes at
once, leaves no mount and no loop device behind.

Volumes are the smallest the driver makes (16 MiB ext4, 1 MiB block), half of each. In the mixed
burst 128 of the 256 calls are stages and publishes, so 128 loop devices are bound at its end;
another test stages 256 volumes at once, 256 loop devices bound together (the kernel makes loop
devices on demand; other tests on this kernel find theirs beside them).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath._pb import csi_pb2_grpc as pb_grpc
from csi_hostpath.client import csi_requests as rq
from tests.support.kernel import loops_backed_under, mounts_under, released_after_teardown
from tests.support.stall import calls_before_settings

MiB = 1 << 20
EACH = 64  # calls of each of the four kinds: 256 at once
NODE = "node-a"
# Generous: 256 calls queue behind --workers threads on a shared 2-core machine. A call that
# isn't answered within it is a failure of its own kind (DEADLINE_EXCEEDED), never a pass.
CALL_SECONDS = 240.0
SETUP_THREADS = 8  # the setup stays below any cap the server may have: only the burst tests it

pytestmark = pytest.mark.timeout(1200)


@dataclass
class Vol:
    volume: pb.Volume
    cap: pb.VolumeCapability
    staging: Path
    target: Path
    publish_context: dict[str, str]


def _cap(i: int) -> tuple[pb.VolumeCapability, int]:
    return (rq.mount_cap("ext4"), 16 * MiB) if i % 2 == 0 else (rq.block_cap(), MiB)


class Stubs:
    """The four services' stubs on one channel; private: a connection of its own."""

    def __init__(self, socket: Path, private: bool = False) -> None:
        options = [("grpc.use_local_subchannel_pool", 1)] if private else []
        self.channel = grpc.insecure_channel(f"unix://{socket}", options=options)
        self.identity = pb_grpc.IdentityStub(self.channel)
        self.controller = pb_grpc.ControllerStub(self.channel)
        self.node = pb_grpc.NodeStub(self.channel)


Call = tuple[str, str, Any]  # (service: identity, controller or node; method; request)


def at_once(socket: Path, calls: list[Call], own_connections: bool) -> Counter[str]:
    """Start every call before waiting for any (on one fresh connection, or each on a fresh
    connection of its own); then each one's code, as "Method CODE: details" for failures."""
    channels: list[Stubs] = []
    try:
        if own_connections:
            channels = [Stubs(socket, private=True) for _ in calls]
        else:
            channels = [Stubs(socket, private=True)] * len(calls)
        pending = [
            (method, getattr(getattr(stubs, service), method).future(request, timeout=CALL_SECONDS))
            for (service, method, request), stubs in zip(calls, channels, strict=True)
        ]
        codes: Counter[str] = Counter()
        for label, future in pending:
            try:
                future.result()
                codes["OK"] += 1
            except grpc.RpcError as e:
                codes[f"{label} {e.code().name}: {(e.details() or '')[:100]}"] += 1
        return codes
    finally:
        for stubs in set(channels):
            stubs.channel.close()


def _serially(work: Callable[[int], Any], count: int) -> list[Any]:
    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        return list(pool.map(work, range(count)))


def _prepared(stubs: Stubs, workdir: Path, prefix: str, count: int, stage: bool) -> list[Vol]:
    """count volumes created and published to the node; staged too if asked."""

    def make(i: int) -> Vol:
        cap, size = _cap(i)
        name = f"{prefix}-{i}"
        volume = stubs.controller.CreateVolume(rq.create_volume(name, cap, size)).volume
        published = stubs.controller.ControllerPublishVolume(
            rq.controller_publish(volume.volume_id, NODE, cap)
        )
        vol = Vol(
            volume,
            cap,
            workdir / "staging" / name,
            workdir / "pods" / name / "volume",
            dict(published.publish_context),
        )
        vol.staging.mkdir(parents=True)
        vol.target.parent.mkdir(parents=True)
        if stage:
            stubs.node.NodeStageVolume(_stage_request(vol))
        return vol

    return _serially(make, count)


def _stage_request(vol: Vol) -> pb.NodeStageVolumeRequest:
    return rq.node_stage(
        vol.volume.volume_id, vol.staging, vol.cap, vol.publish_context, vol.volume.volume_context
    )


def _publish_request(vol: Vol) -> pb.NodePublishVolumeRequest:
    return rq.node_publish(
        vol.volume.volume_id,
        vol.staging,
        vol.target,
        vol.cap,
        publish_context=vol.publish_context,
        volume_context=vol.volume.volume_context,
    )


def _driver_threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@contextlib.contextmanager
def _driver(spawn: Any) -> Iterator[tuple[Any, Stubs]]:
    handle, client = spawn("d")
    assert client is not None
    stubs = Stubs(client.socket)
    try:
        yield handle, stubs
    finally:
        stubs.channel.close()


def _served(socket: Path, calls: list[Call], own_connections: bool) -> None:
    codes = at_once(socket, calls, own_connections)
    assert codes == Counter({"OK": len(calls)}), codes


def _tear_down(
    socket: Path, stubs: Stubs, published: list[Vol], staged: list[Vol], own: bool
) -> None:
    """Each step of the CO's teardown, sent for every volume at once; then every volume deleted
    at once. Afterwards no mount and no loop device of the test is left."""
    ids = sorted(
        e.volume.volume_id for e in stubs.controller.ListVolumes(pb.ListVolumesRequest()).entries
    )
    waves: list[list[Call]] = [
        [
            ("node", "NodeUnpublishVolume", rq.node_unpublish(v.volume.volume_id, v.target))
            for v in published
        ],
        [
            ("node", "NodeUnstageVolume", rq.node_unstage(v.volume.volume_id, v.staging))
            for v in staged
        ],
        [
            (
                "controller",
                "ControllerUnpublishVolume",
                rq.controller_unpublish(v.volume.volume_id, NODE),
            )
            for v in staged
        ],
        [("controller", "DeleteVolume", rq.delete_volume(volume_id)) for volume_id in ids],
    ]
    for wave in waves:
        _served(socket, wave, own)
    assert stubs.controller.ListVolumes(pb.ListVolumesRequest()).entries == []


def _nothing_left(workdir: Path, vols: list[Vol]) -> None:
    # The kubelet removes the staging and target directories once the driver has answered.
    points = [v.staging for v in vols] + [v.target.parent for v in vols]
    assert released_after_teardown(workdir, *points) == []
    assert mounts_under(workdir) == []
    assert loops_backed_under(workdir) == []


def _mixed_burst(spawn: Any, workdir: Path, own_connections: bool) -> None:
    with _driver(spawn) as (handle, stubs):
        to_stage = _prepared(stubs, workdir, "stage", EACH, stage=False)
        to_publish = _prepared(stubs, workdir, "publish", EACH, stage=True)
        threads_before = _driver_threads(handle.proc.pid)
        calls: list[Call] = []
        for i in range(EACH):
            cap, size = _cap(i)
            calls += [
                ("identity", "Probe", pb.ProbeRequest()),
                ("controller", "CreateVolume", rq.create_volume(f"new-{i}", cap, size)),
                ("node", "NodeStageVolume", _stage_request(to_stage[i])),
                ("node", "NodePublishVolume", _publish_request(to_publish[i])),
            ]
        _served(handle.socket, calls, own_connections)
        # The calls waited for the executors' threads: a thread each would add 256.
        added = _driver_threads(handle.proc.pid) - threads_before
        assert added < EACH, f"{added} threads more after the burst"
        listed = stubs.controller.ListVolumes(pb.ListVolumesRequest()).entries
        assert len({e.volume.volume_id for e in listed}) == 3 * EACH, "each CreateVolume made one"
        staged = to_stage + to_publish
        _tear_down(handle.socket, stubs, to_publish, staged, own_connections)
    _nothing_left(workdir, staged)


def test_256_calls_at_once_on_one_connection_are_all_served(spawn: Any, workdir: Path) -> None:
    _mixed_burst(spawn, workdir, own_connections=False)


def test_256_calls_at_once_each_on_its_own_connection_are_all_served(
    spawn: Any, workdir: Path
) -> None:
    _mixed_burst(spawn, workdir, own_connections=True)


def test_256_volumes_staged_at_once_then_published_at_once(spawn: Any, workdir: Path) -> None:
    """256 loop devices bound at once: every volume staged in one burst on one connection, then
    published in another."""
    count = 4 * EACH
    with _driver(spawn) as (handle, stubs):
        vols = _prepared(stubs, workdir, "vol", count, stage=False)
        _served(
            handle.socket, [("node", "NodeStageVolume", _stage_request(v)) for v in vols], False
        )
        _served(
            handle.socket,
            [("node", "NodePublishVolume", _publish_request(v)) for v in vols],
            False,
        )
        assert len(loops_backed_under(workdir)) == count
        _tear_down(handle.socket, stubs, vols, vols, False)
    _nothing_left(workdir, vols)


def test_calls_sent_before_the_settings_are_read_are_all_answered(spawn: Any) -> None:
    """A client may write its calls before it has read the server's SETTINGS (and so before it
    knows any limit the server sets): 256 whole Probe calls at once, each answered, none reset."""
    _, client = spawn("d")
    assert client is not None
    fate = calls_before_settings(
        client.socket, "/csi.v1.Identity/Probe", pb.ProbeRequest().SerializeToString(), 256, 120
    )
    assert Counter(fate.values()) == Counter({"answered": 256}), Counter(fate.values())
