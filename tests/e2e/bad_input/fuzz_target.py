"""The driver under fuzz (Target), what it holds for the strategies to aim at (Seed), and what
every example must leave true: a spec code, a live driver that answers Probe, a tidy work directory.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import HealthCheck, settings

from csi_hostpath._pb import csi_pb2 as pb
from tests.conftest import Client, DriverProcess, driver_args, in_process
from tests.support import helpers as h
from tests.support.processes import UNSHARE

C = grpc.StatusCode
SPEC_CODES = frozenset(
    {
        C.OK,
        C.INVALID_ARGUMENT,
        C.NOT_FOUND,
        C.ALREADY_EXISTS,
        C.FAILED_PRECONDITION,
        C.OUT_OF_RANGE,
        C.RESOURCE_EXHAUSTED,
        C.ABORTED,
        C.UNIMPLEMENTED,
    }
)
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
RAW_EXAMPLES = int(os.environ.get("FUZZ_RAW_EXAMPLES", "40"))
FAKE_EXAMPLES = int(os.environ.get("FUZZ_FAKE_EXAMPLES", "15"))
FAKE_RAW_EXAMPLES = int(os.environ.get("FUZZ_FAKE_RAW_EXAMPLES", "5"))
RPC_TIMEOUT = 60.0
SERVICES = {"Identity": "identity", "Controller": "controller", "Node": "node"}
METHODS: list[MethodDescriptor] = [
    m for name in SERVICES for m in pb.DESCRIPTOR.services_by_name[name].methods
]


@dataclass
class Seed:
    """What exists in the driver, for strategies to aim at. Rebuilt before every test."""

    node_id: str
    root: Path
    names: dict[str, str] = field(default_factory=lambda: {"fs": "seed-fs", "block": "seed-block"})
    snapshot_name: str = "seed-snap"
    renames: int = 0
    volume_ids: list[str] = field(default_factory=list)
    snapshot_ids: list[str] = field(default_factory=list)
    contexts: list[dict[str, str]] = field(default_factory=list)
    volume_contexts: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    @property
    def fuzz_root(self) -> Path:
        """Where generated paths that the driver may accept live."""
        return self.root / "fz"


@dataclass
class Target:
    """The driver under fuzz: a real `csi-hostpath serve` process in its own mount namespace
    (handle set), or a driver served in this process on the fake system layer (handle None)."""

    root: Path
    handle: DriverProcess | None
    client: Client
    seed: Seed
    cwd: str
    mounts_outside: set[tuple[str, str, str]]
    examples: int = EXAMPLES
    raw_examples: int = RAW_EXAMPLES

    def _mount_table(self) -> list[tuple[str, str, str]]:
        """(mount point, fs type, source) of every mount the driver sees: the real process's
        namespace, or the fake kernel's records (the host's own mounts, which other tests
        change at will, are no business of an in-process fake driver)."""
        kernel = self.client.kernel
        if kernel is not None:
            with kernel.lock:
                return [
                    (m.entry.mount_point, m.entry.fs_type, m.entry.source) for m in kernel.mounts
                ]
        assert self.handle is not None and self.handle.proc is not None
        rows = []
        for line in Path(f"/proc/{self.handle.proc.pid}/mountinfo").read_text().splitlines():
            fields = line.split()
            sep = fields.index("-", 6)
            rows.append((fields[4], fields[sep + 1], fields[sep + 2]))
        return rows

    def _inside(self, point: str) -> bool:
        return point.startswith(str(self.root) + "/")

    def mounts(self) -> set[tuple[str, str, str]]:
        """Every mount outside the work directory, in the driver's view."""
        return {
            row
            for row in self._mount_table()
            if not self._inside(row[0]) and row[0] != str(self.root)
        }

    def gone_elsewhere(self, row: tuple[str, str, str]) -> bool:
        """Did a mount outside the work directory leave the driver's view because its mount point
        is gone? The driver's namespace is a private copy of the host's, so another process on
        the kernel removing a directory it had mounted on (a concurrent test's cleanup) detaches
        the copy here too (d_invalidate). The driver itself can't do that: rmdir of a mount
        point in its own namespace is EBUSY, and umount leaves the directory. A mount the driver
        took down keeps its mount point, so it is still reported."""
        if self.handle is None or self.handle.proc is None:
            return False  # the fake kernel's records change only through the driver
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), row[0])
        return not os.path.lexists(f"/proc/{self.handle.proc.pid}/root{point}")

    def alive(self) -> bool:
        if self.handle is None:
            return True  # in this process: a crash would have ended the test run itself
        return self.handle.proc is not None and self.handle.proc.poll() is None

    def log(self) -> str:
        return (
            "(in-process driver: its log is pytest's)" if self.handle is None else self.handle.log()
        )

    def mounted_inside(self) -> set[str]:
        """The mount points under the work directory, in the driver's view."""
        return {row[0] for row in self._mount_table() if self._inside(row[0])}


def _undo(client: Client, vid: str, staging: Path, target: Path) -> None:
    """Take a seed volume down from wherever the fuzz left it; errors only mean there was less
    to undo (the setup that follows says whether the state is right)."""
    with suppress(grpc.RpcError):
        h.node_unpublish(client, vid, target)
    with suppress(grpc.RpcError):
        h.unstage(client, vid, staging)
    with suppress(grpc.RpcError):
        h.unpublish(client, vid, "")


def reseed(client: Client, seed: Seed) -> None:
    """Bring the seed volumes back to staged-and-published, whatever the last test did to them.
    Every step is idempotent; a deleted volume is created again under its name, and a name the
    fuzz took over (a volume of another size under it, say) is replaced by a new one."""
    previous = dict(zip(seed.names, seed.volume_ids, strict=False))
    seed.volume_ids, seed.contexts, seed.volume_contexts, seed.paths = [], [], [], []
    for kind, cap, size in (
        ("fs", h.mount_cap("ext4"), 32 * h.MiB),
        ("block", h.block_cap(), 16 * h.MiB),
    ):
        staging = seed.root / "seed" / kind / "staging"
        target = seed.root / "seed" / kind / "target"
        if kind in previous:
            _undo(client, previous[kind], staging, target)
        try:
            vol = h.create(client, seed.names[kind], cap, size)
        except grpc.RpcError as e:
            if e.code() != C.ALREADY_EXISTS:
                raise
            seed.renames += 1
            seed.names[kind] = f"seed-{kind}-{seed.renames}"
            vol = h.create(client, seed.names[kind], cap, size)
        vid = vol.volume_id
        _undo(client, vid, staging, target)
        staging.mkdir(parents=True, exist_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        ctx = h.publish(client, vid, seed.node_id, cap)
        h.stage(client, vol, staging, cap, ctx)
        h.node_publish(client, vid, staging, target, cap)
        seed.volume_ids.append(vid)
        seed.contexts.append(ctx)
        seed.volume_contexts.append(dict(vol.volume_context))
        seed.paths += [str(staging), str(target)]
    for _ in range(2):
        request = pb.CreateSnapshotRequest(
            source_volume_id=seed.volume_ids[0], name=seed.snapshot_name
        )
        try:
            seed.snapshot_ids = [client.controller.CreateSnapshot(request).snapshot.snapshot_id]
            return
        except grpc.RpcError as e:
            if e.code() != C.ALREADY_EXISTS:
                raise
            seed.renames += 1
            seed.snapshot_name = f"seed-snap-{seed.renames}"
    raise AssertionError("could not make the seed snapshot")


@contextmanager
def real_target(root: Path) -> Iterator[Target]:
    # A node ID of our own: the driver tags loop devices by node ID (see harness.unique_node_id).
    node_id = f"fuzz-{uuid.uuid4().hex[:8]}"
    # Its own mount namespace too: whatever a request makes it mount stays away from the host.
    handle = DriverProcess(
        driver_args(root, "drv", "--allow-inline-volumes", node_id=node_id),
        root / "drv.sock",
        root / "drv.log",
        UNSHARE,
    )
    client: Client | None = None
    try:
        client = handle.start()
        assert handle.proc is not None
        cwd = os.readlink(f"/proc/{handle.proc.pid}/cwd")
        yield Target(root, handle, client, Seed(node_id, root), cwd, set())
    finally:
        if client is not None:
            client.close()
        handle.stop()


@contextmanager
def fake_target(root: Path) -> Iterator[Target]:
    from csi_hostpath.system.fake import FakeKernel, fake_system

    kernel = FakeKernel()
    with in_process(
        root, "drv", system=lambda pool: fake_system(pool, kernel=kernel), kernel=kernel
    ) as client:
        seed = Seed("node-a", root)
        yield Target(root, None, client, seed, os.getcwd(), set(), FAKE_EXAMPLES, FAKE_RAW_EXAMPLES)


def probe_ok(t: Target) -> None:
    assert t.alive(), t.log()
    response = t.client.identity.Probe(pb.ProbeRequest(), timeout=RPC_TIMEOUT)
    assert response.ready.value


def inside_is_tidy(t: Target) -> None:
    """The driver wrote only into its state directory and the given paths."""
    expected = {"drv-state", "drv.sock", "drv.log", "fz", "seed"}
    assert set(os.listdir(t.root)) <= expected, os.listdir(t.root)


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings for one fuzz run: the layer decides how many examples (the inner
    @given is built per test, so the count can follow the target's layer)."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )
