"""Hostile requests and raw bytes over gRPC to one long-lived `--mode all` driver, real or fake.

Every request message of the Identity, Controller and Node services is generated from its
protobuf descriptor: random and hostile strings ("..", "/", NUL, 129-byte IDs, 5 KiB maps),
negative and huge integers, unknown enum values, oneofs left empty, fields left unset, unknown
fields appended. Fields the driver acts on are drawn partly from what exists (the seed volumes,
their publish contexts and paths), so that requests get past the first checks.

For every example: the answer is a status code of the spec (never UNKNOWN, never INTERNAL), the
process is still alive, no mount appeared or vanished outside the work directory, and nothing was
created at a path the request named outside it. Given paths are kept inside the work directory
except hostile ones (relative, with '..', with NUL), which the driver must refuse or ignore. After
each RPC's run, Probe answers ready. Then raw malformed protobuf bytes go to every method.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message as pb_message
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.core.quantity import QuantityError, parse_bytes
from tests import helpers as h
from tests.conftest import LAYERS, Client, DriverProcess, driver_args, in_process, scratch_parent
from tests.kernel import cleanup_kernel
from tests.needs import fs_available
from tests.processes import UNSHARE

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
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"

# Driver bugs (each pinned by a strict xfail test in test_driver_bugs.py) whose triggers the
# strategies leave out while they stand, so that every run keeps looking for new failures instead
# of finding these again. Remove an entry once the driver is fixed and its xfail is gone.
KNOWN_BUGS: frozenset[str] = frozenset()  # every bug the fuzz found so far is fixed
SAFE_MOUNT_FLAGS = ("noatime", "nodiratime", "relatime", "sync", "nodev", "nosuid", "noexec")


def _path_type_bug(request: Any) -> bool:
    """Would the request publish a block volume onto a directory, a filesystem onto a file, or
    use a path under a regular file? (Decided on the filesystem as it is when drawn, which is
    as it is when sent: examples run one at a time.)"""
    for name in ("target_path", "staging_target_path"):
        path = getattr(request, name, "")
        if not path.startswith("/") or "\x00" in path or len(path) > 4096:
            continue
        if any(os.path.lexists(p) and not os.path.isdir(p) for p in Path(path).parents):
            return True
        exists, is_dir = os.path.lexists(path), os.path.isdir(path)
        block = request.volume_capability.HasField("block")
        if name == "target_path" and (is_dir if block else exists and not is_dir):
            return True
        if name == "staging_target_path" and exists and not is_dir and not block:
            return True
    return False


def _nests(request: Any, mounted: set[str]) -> bool:
    """Would the request mount inside something mounted (so that unmounting that one later is
    EBUSY)?"""
    for name in ("target_path", "staging_target_path"):
        path = getattr(request, name, "")
        if any(path.startswith(point + "/") for point in mounted):
            return True
    return False


def _shrinks(request: Any) -> bool:
    """ControllerExpandVolume with only a limit: the driver records the limit as the size."""
    r = request.capacity_range
    return bool(r.required_bytes == 0 and r.limit_bytes > 0)


def _int_bug(s: str) -> bool:
    """int(s) fails though s.isdigit(): superscripts and the like, or over 4300 digits."""
    return s.isdigit() and (not s.isdecimal() or len(s) > 4000)


# ----- the driver under test -----
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


def _reseed(client: Client, seed: Seed) -> None:
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
def _real_target(root: Path) -> Iterator[Target]:
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
def _fake_target(root: Path) -> Iterator[Target]:
    from csi_hostpath.system.fake import FakeKernel, fake_system

    kernel = FakeKernel()
    with in_process(
        root, "drv", system=lambda pool: fake_system(pool, kernel=kernel), kernel=kernel
    ) as client:
        seed = Seed("node-a", root)
        yield Target(root, None, client, seed, os.getcwd(), set(), FAKE_EXAMPLES, FAKE_RAW_EXAMPLES)


# The fake layer runs in `make unit` (no root, a minute for everything): fewer examples per RPC
# there; the real layer keeps the full count.
@pytest.fixture(scope="module", params=LAYERS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    real = request.param == "real"
    root = Path(tempfile.mkdtemp(prefix="csihp-test-", dir=scratch_parent(real)))
    try:
        with (_real_target if real else _fake_target)(root) as t:
            t.seed.fuzz_root.mkdir()
            _reseed(t.client, t.seed)
            t.mounts_outside = t.mounts()
            yield t
    finally:
        cleanup_kernel(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh(target: Target) -> Iterator[Target]:
    """The seed state rebuilt before each test (a test's examples may well undo it); after the
    test, the driver still answers Probe and wrote only where it may."""
    assert target.alive(), target.log()
    _reseed(target.client, target.seed)
    yield target
    _probe_ok(target)
    _inside_is_tidy(target)


# ----- strategies -----
# Hypothesis leans to the first elements: the empty string (a missing field) comes later, so
# that deeper paths get their share.
HOSTILE_TEXT = [
    "..",
    "vol-" + "0" * 32,
    "x" * 129,
    "a\x00b",
    "",
    ".",
    "/",
    "//",
    "/..",
    "../..",
    "\x00",
    "vol-" + "0" * 31,
    "vol-" + "0" * 32 + "\n",
    "VOL-" + "A" * 32,
    "snap-" + "0" * 32,
    "x" * 128,
    "é" * 65,
    "²",
    "١٢٣",
    "-1",
    "0",
    "9" * 19,
    "%s%n%x",
    "$(reboot)",
    "`id`",
    "; rm -rf /",
    "--help",
    "-o",
    "\n",
    "\t",
    " ",
    "\u202e",
    "\ufeff",
    "\U0001f642" * 40,
    "~root",
    "*",
    "ro,remount",
    "true",
    "null",
]


def hostile_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.text(max_size=24),
        st.text(min_size=129, max_size=300),
        st.builds(
            lambda piece, n: piece * n,
            st.sampled_from(["x", "/", "\x00", "é", "../", "%n"]),
            st.integers(129, 5200),
        ),
    )


def hostile_map() -> st.SearchStrategy[dict[str, str]]:
    return st.one_of(
        st.dictionaries(hostile_text(), hostile_text(), max_size=4),
        # 5 KiB maps: one huge value, or many entries.
        st.just({"big": "v" * 5120}),
        st.integers(1, 200).map(lambda n: {f"key-{i:03d}": "v" * (5120 // n) for i in range(n)}),
    )


INT_EDGES = [0, 1, -1, 4096, 1 << 20, 16 << 20, 300 << 20, 1 << 30, 1 << 40, 2**62]
INT64 = st.one_of(
    st.sampled_from([*INT_EDGES, -(2**63), 2**63 - 1]), st.integers(-(2**63), 2**63 - 1)
)
INT32 = st.one_of(
    st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1)
)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)


def _ephemeral_size_ok(text: str) -> bool:
    """Keep inline volume sizes that are cheap to serve: up to 1 GiB (a real mkfs runs), or
    not a size at all (refused)."""
    try:
        size = parse_bytes(text)
    except QuantityError:
        return True  # refused by the driver: cheap
    return size <= 1 << 30


def _refusable(path: str) -> str:
    """A random string made into a path the driver must refuse: a valid absolute path outside
    the work directory is a real target path, which this test does not hand out."""
    if path.startswith("/") and "\x00" not in path and ".." not in path.split("/"):
        return "rel" + path
    return path


def unknown_fields() -> st.SearchStrategy[bytes]:
    """Wire bytes of fields no CSI message has: a receiver must skip them."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def encode(number: int, payload: bytes | int) -> bytes:
        if isinstance(payload, int):
            return varint(number << 3) + varint(payload)
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    one = st.builds(
        encode, st.integers(1000, 2**29 - 1), st.one_of(st.integers(0, 2**64 - 1), st.binary())
    )
    return st.lists(one, max_size=3).map(b"".join)


VALID_CAPS = st.sampled_from(
    [
        h.mount_cap("ext4"),
        h.mount_cap(""),
        *([h.mount_cap("xfs")] if fs_available("xfs") else []),
        h.mount_cap("ext4", h.Mode.SINGLE_NODE_SINGLE_WRITER),
        h.mount_cap("ext4", h.Mode.MULTI_NODE_READER_ONLY),
        h.mount_cap("ext4", flags=SAFE_MOUNT_FLAGS[:2]),
        h.block_cap(),
        h.block_cap(h.Mode.MULTI_NODE_MULTI_WRITER),
    ]
)


@dataclass
class Strategies:
    """Request strategies for one RPC, aimed at what the seed holds. mounted() lists the mount
    points in the driver's namespace under its work directory."""

    seed: Seed
    method: str
    mounted: Callable[[], set[str]] = set

    def paths(self) -> st.SearchStrategy[str]:
        root = str(self.seed.fuzz_root)
        component = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=12)
        inside = st.lists(component.filter(lambda c: c not in (".", "..")), min_size=1, max_size=3)
        hostile = [
            "",
            ".",
            "..",
            "relative",
            "rel/x",
            "/etc/../x",
            "/tmp/../etc/csihp-fuzz",
            "/../../etc/csihp-fuzz",
            f"{root}/../escape",
            f"{root}/a/../../escape",
            f"{root}/./../x",
            f"{root}/nul\x00x",
            "\x00",
            "../../../../etc/passwd",
        ]
        return st.one_of(
            inside.map(lambda parts: os.path.join(root, *parts)),
            st.sampled_from(self.seed.paths),
            st.sampled_from(hostile),
            st.text(max_size=40).map(_refusable),
        )

    def text(self, name: str) -> st.SearchStrategy[str]:
        seed = self.seed
        if name in ("volume_id", "source_volume_id"):
            well_formed = st.binary(min_size=16, max_size=16).map(lambda b: "vol-" + b.hex())
            return st.one_of(
                hostile_text(),
                st.sampled_from(seed.volume_ids),
                well_formed,
                st.sampled_from(["csi-inline-1", "csi-inline-2"]),
            )
        if name == "snapshot_id":
            well_formed = st.binary(min_size=16, max_size=16).map(lambda b: "snap-" + b.hex())
            return st.one_of(hostile_text(), st.sampled_from(seed.snapshot_ids), well_formed)
        if name == "node_id":
            return st.one_of(hostile_text(), st.just(seed.node_id))
        if name == "name":
            names = [*seed.names.values(), seed.snapshot_name, "fz-1"]
            return st.one_of(hostile_text(), st.sampled_from(names))
        if name in ("target_path", "staging_target_path", "volume_path", "staging_path"):
            return self.paths()
        if name == "starting_token":
            token = st.one_of(hostile_text(), st.integers(0, 10**20).map(str))
            if "non-decimal-digit-token" in KNOWN_BUGS:
                token = token.filter(lambda s: not _int_bug(s))
            return token
        if name == "fs_type":
            return st.one_of(hostile_text(), st.sampled_from(["ext4", "xfs", "", "btrfs"]))
        return hostile_text()

    def string_map(self, name: str) -> st.SearchStrategy[dict[str, str]]:
        seed = self.seed
        if name == "publish_context":
            generation = st.one_of(hostile_text(), st.integers(0, 10**6).map(str))
            if "non-decimal-digit-generation" in KNOWN_BUGS:
                generation = generation.filter(lambda s: not _int_bug(s))
            return st.one_of(
                hostile_map(),
                st.sampled_from(seed.contexts),
                generation.map(lambda g: {"generation": g}),
            )
        if name == "volume_context":
            size = st.one_of(
                st.sampled_from(
                    ["16Mi", "100Mi", "1Gi", "0", "", "abc", "-1", "1.5Gi", "٣Mi", "9" * 20 + "Ti"]
                ),
                st.text(max_size=8),
            ).filter(_ephemeral_size_ok)
            ephemeral = st.fixed_dictionaries(
                {EPHEMERAL_KEY: st.sampled_from(["true", "True", "false", ""])},
                optional={"size": size, "fsType": st.sampled_from(["ext4", "xfs", "ntfs", ""])},
            )
            return st.one_of(hostile_map(), st.sampled_from(seed.volume_contexts), ephemeral)
        if name == "segments":
            key = "topology.loop.hostpath.csi.dev/node"
            return st.one_of(hostile_map(), st.just({key: seed.node_id}))
        return hostile_map()

    def value(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            flags_bug = "mount-flags-rejected-by-mount" in KNOWN_BUGS
            # NodePublish mounts too: an inline ephemeral volume is formatted and mounted there.
            mounting = self.method in ("NodeStageVolume", "NodePublishVolume")
            if f.name == "mount_flags" and mounting and flags_bug:
                return st.sampled_from(SAFE_MOUNT_FLAGS)
            return self.text(f.name)
        if t == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=64)
        if t == FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        if t == FieldDescriptor.TYPE_ENUM:
            known = [v.number for v in f.enum_type.values]
            return st.one_of(st.sampled_from(known), INT32)
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
            return INT64
        if t in (FieldDescriptor.TYPE_SFIXED64,):
            return INT64
        if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32):
            return INT32
        if t in (FieldDescriptor.TYPE_SFIXED32,):
            return INT32
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return UINT32
        if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return UINT64
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return st.floats(width=32 if t == FieldDescriptor.TYPE_FLOAT else 64)
        assert t == FieldDescriptor.TYPE_MESSAGE, f.full_name
        return self.message(f.message_type, depth + 1)

    def message(self, desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        if depth > 4:
            return st.just(cls())
        generic = self._generic(desc, depth)
        if desc.full_name == "csi.v1.VolumeCapability":
            return st.one_of(VALID_CAPS, generic)
        return generic

    def _generic(self, desc: Descriptor, depth: int) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        if not desc.fields:
            return st.builds(cls)

        @st.composite
        def build(draw: st.DrawFn) -> Any:
            msg = cls()
            for oneof in desc.oneofs:  # one member, or none at all
                chosen = draw(st.sampled_from([None, *oneof.fields]))
                if chosen is not None:
                    _assign(msg, chosen, draw(self.field_value(chosen, depth)))
            for f in desc.fields:
                if f.containing_oneof is None and draw(st.booleans()):
                    _assign(msg, f, draw(self.field_value(f, depth)))
            return msg

        return build()

    def field_value(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            if value_field.type == FieldDescriptor.TYPE_STRING:
                return self.string_map(f.name)
            return st.dictionaries(hostile_text(), self.value(value_field, depth), max_size=3)
        if f.is_repeated:
            return st.lists(self.value(f, depth), max_size=3)
        return self.value(f, depth)

    # ----- plausible requests, then a few hostile changes -----
    def inside_path(self) -> st.SearchStrategy[str]:
        root = str(self.seed.fuzz_root)
        names = st.sampled_from(["a", "b", "c", "pod", "mount", "globalmount"])
        return st.lists(names, min_size=1, max_size=3).map(lambda p: os.path.join(root, *p))

    def plausible(self, f: FieldDescriptor) -> st.SearchStrategy[Any] | None:
        """A value that gets past the first checks, for the fields the driver acts on; None
        for the others, which the template leaves unset."""
        seed, name = self.seed, f.name
        caps = VALID_CAPS
        topology = st.just(
            pb.Topology(segments={"topology.loop.hostpath.csi.dev/node": seed.node_id})
        )
        plausible: dict[str, st.SearchStrategy[Any]] = {
            "volume_id": st.sampled_from([*seed.volume_ids, "csi-inline-1"]),
            "source_volume_id": st.sampled_from(seed.volume_ids),
            "snapshot_id": st.sampled_from(seed.snapshot_ids),
            "node_id": st.just(seed.node_id),
            "name": st.sampled_from(["fz-1", "fz-2", *seed.names.values(), seed.snapshot_name]),
            "staging_target_path": st.one_of(st.sampled_from(seed.paths), self.inside_path()),
            "target_path": st.one_of(self.inside_path(), st.sampled_from(seed.paths)),
            "volume_path": st.sampled_from(seed.paths),
            "volume_capability": caps,
            "volume_capabilities": st.lists(caps, min_size=1, max_size=2),
            "capacity_range": st.builds(
                lambda r, lim: pb.CapacityRange(required_bytes=r, limit_bytes=lim),
                st.sampled_from([0, 16 << 20, 32 << 20, 64 << 20, 320 << 20]),
                st.sampled_from([0, 64 << 20, 1 << 30]),
            ),
            "publish_context": st.sampled_from(seed.contexts),
            "volume_context": self.string_map("volume_context"),
            "readonly": st.booleans(),
            "starting_token": st.sampled_from(["", "1", "2"]),
            "max_entries": st.integers(0, 3),
            "accessible_topology": topology,
            "accessibility_requirements": topology.map(
                lambda t: pb.TopologyRequirement(requisite=[t], preferred=[t])
            ),
            "volume_content_source": st.one_of(
                st.sampled_from(seed.snapshot_ids).map(
                    lambda i: pb.VolumeContentSource(
                        snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=i)
                    )
                ),
                st.sampled_from(seed.volume_ids).map(
                    lambda i: pb.VolumeContentSource(
                        volume=pb.VolumeContentSource.VolumeSource(volume_id=i)
                    )
                ),
            ),
        }
        return plausible.get(name)

    def template(self, desc: Descriptor) -> st.SearchStrategy[Any]:
        cls = GetMessageClass(desc)
        fields = list(desc.fields)
        if not fields:
            return st.builds(cls)

        @st.composite
        def build(draw: st.DrawFn) -> Any:
            msg = cls()
            for f in fields:
                value = self.plausible(f)
                # sampled_from leans to its first element, as Hypothesis leans to simple
                # data: here, to setting the field.
                if value is not None and draw(st.sampled_from([True] * 19 + [False])):
                    _assign(msg, f, draw(value))
            # Then a field or two made hostile, or cleared; a third of the requests stay as
            # they are, to exercise what the driver does when it accepts.
            count = draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
            for f in draw(st.lists(st.sampled_from(fields), min_size=count, max_size=count)):
                msg.ClearField(f.name)
                if draw(st.sampled_from([True, True, True, False])):
                    _assign(msg, f, draw(self.field_value(f, 1)))
            return msg

        return build()

    def request(self, desc: Descriptor) -> st.SearchStrategy[Any]:
        def with_unknown(pair: tuple[Any, bytes]) -> Any:
            msg, extra = pair
            msg.MergeFromString(extra)
            return msg

        # Mostly plausible requests with a hostile twist, to get deep; some wholly random.
        template = self.template(desc)
        shapes = st.one_of(template, template, template, self.message(desc))
        mounting = self.method in ("NodeStageVolume", "NodePublishVolume")
        if "path-of-the-wrong-type" in KNOWN_BUGS and mounting:
            shapes = shapes.filter(lambda r: not _path_type_bug(r))
        if "unpublish-busy-target" in KNOWN_BUGS and mounting:
            shapes = shapes.filter(lambda r: not _nests(r, self.mounted()))
        if "expand-limit-only-shrinks" in KNOWN_BUGS and self.method == "ControllerExpandVolume":
            shapes = shapes.filter(lambda r: not _shrinks(r))
        return st.tuples(shapes, unknown_fields()).map(with_unknown)


def _assign(msg: Any, f: FieldDescriptor, value: Any) -> None:
    target = getattr(msg, f.name)
    if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
        for k, v in value.items():
            if isinstance(v, pb_message.Message):
                target[k].CopyFrom(v)
            else:
                target[k] = v
    elif f.is_repeated:
        target.extend(value)
    elif f.type == FieldDescriptor.TYPE_MESSAGE:
        target.CopyFrom(value)
    else:
        setattr(msg, f.name, value)


# ----- the checks -----
def _strings(msg: pb_message.Message) -> Iterator[str]:
    """Every string a request carries, map keys included."""
    for f, value in msg.ListFields():
        values = value if f.is_repeated else [value]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            for k, v in value.items():
                yield str(k)
                if isinstance(v, str):
                    yield v
                elif isinstance(v, pb_message.Message):
                    yield from _strings(v)
            continue
        for v in values:
            if isinstance(v, str):
                yield v
            elif isinstance(v, pb_message.Message):
                yield from _strings(v)


def _outside_candidates(t: Target, request: pb_message.Message) -> dict[str, bool]:
    """Each path outside the work directory that a string of the request could name (as given,
    normalised, or relative to the driver's working directory), and whether it exists now."""
    inside = str(t.root) + "/"
    found: dict[str, bool] = {}
    for s in _strings(request):
        if not s or "\x00" in s or len(s) > 4096:
            continue
        for p in {s, os.path.normpath(s), os.path.normpath(os.path.join(t.cwd, s))}:
            if not p.startswith(inside) and p not in found:
                found[p] = os.path.lexists(p)
    return found


WATCHED_DIRS = ("/", "/etc")


def _listing() -> dict[str, set[str]]:
    return {d: set(os.listdir(d)) for d in WATCHED_DIRS}


def _check_one(t: Target, method: MethodDescriptor, request: pb_message.Message) -> None:
    before = _outside_candidates(t, request)
    listing = _listing()
    stub = getattr(t.client, SERVICES[method.containing_service.name])
    code, details = C.OK, ""
    try:
        getattr(stub, method.name)(request, timeout=RPC_TIMEOUT)
    except grpc.RpcError as e:
        code, details = e.code(), e.details() or ""
    event(
        code.name + " " + details[:50]
    )  # --hypothesis-show-statistics shows how deep the examples got
    assert t.alive(), f"the driver died on {method.name}:\n{t.log()}"
    assert code in SPEC_CODES, (
        f"{method.name} answered {code.name}: {details[:2000]}\nrequest:\n{str(request)[:3000]}"
    )
    created = [p for p, existed in before.items() if not existed and os.path.lexists(p)]
    assert not created, f"{method.name} created {created} outside its work directory"
    assert _listing() == listing, f"{method.name} changed {WATCHED_DIRS}"
    now = t.mounts()
    # Only the driver's doing counts: a mount another process's cleanup detached is forgotten.
    t.mounts_outside -= {row for row in t.mounts_outside - now if t.gone_elsewhere(row)}
    assert now == t.mounts_outside, (
        f"{method.name} changed the mounts outside its work directory: "
        f"+{now - t.mounts_outside} -{t.mounts_outside - now}"
    )


def _probe_ok(t: Target) -> None:
    assert t.alive(), t.log()
    response = t.client.identity.Probe(pb.ProbeRequest(), timeout=RPC_TIMEOUT)
    assert response.ready.value


def _inside_is_tidy(t: Target) -> None:
    """The driver wrote only into its state directory and the given paths."""
    expected = {"drv-state", "drv.sock", "drv.log", "fz", "seed"}
    assert set(os.listdir(t.root)) <= expected, os.listdir(t.root)


def _fuzz_settings(examples: int) -> settings:
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


@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_hostile_requests_get_spec_codes_only(fresh: Target, method: MethodDescriptor) -> None:
    strategy = Strategies(fresh.seed, method.name, fresh.mounted_inside).request(method.input_type)

    @_fuzz_settings(fresh.examples)
    @given(request=strategy)
    def one(request: pb_message.Message) -> None:
        _check_one(fresh, method, request)

    one()


# ----- raw bytes on the wire -----
RAW_GARBAGE = [
    b"",
    b"\x00",
    b"\xff" * 16,
    b"\x08" + b"\xff" * 10 + b"\x01",  # a varint of 11 bytes
    b"\x0a\xff\xff\xff\xff\x0f",  # a length far past the end
    b"\x0a\x05ab",  # a length past the end
    b"\x0a\x02\xff\xfe",  # field 1 as a string of invalid UTF-8
    b"\x0d\x00\x00\x00\x00",  # field 1 with the fixed32 wire type
    b"\x0b\x0c",  # a group start and end
    b"\x0b" * 200,  # groups never closed
    b"\x0c",  # a group end with no start
    b"\x00\x01",  # field number 0
    b"\xf8\xff\xff\xff\x0f\x01",  # the largest field number
    b"\x0f",  # wire type 7 (none such)
    b"\x12\x03\x0a\x01" + b"\x12\x7f" * 60,  # nested messages cut short
    b"\x1a\x80\x80\x80\x80\x10",  # a length over 4 GiB
    bytes(range(256)),
]


@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_raw_garbage_bytes_never_crash_it(fresh: Target, method: MethodDescriptor) -> None:
    path = f"/csi.v1.{method.containing_service.name}/{method.name}"
    call = fresh.client.channel.unary_unary(
        path, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )

    @_fuzz_settings(fresh.raw_examples)
    @given(payload=st.one_of(st.sampled_from(RAW_GARBAGE), st.binary(max_size=512)))
    def one(payload: bytes) -> None:
        code = C.OK
        try:
            call(payload, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            code = e.code()
        assert fresh.alive(), f"the driver died on raw bytes to {method.name}:\n{fresh.log()}"
        try:
            GetMessageClass(method.input_type).FromString(payload)
        except pb_message.DecodeError:
            # gRPC itself refuses what does not parse, before the driver sees it.
            assert code != C.OK, f"{method.name} accepted bytes that do not parse"
        else:
            assert code in SPEC_CODES, f"{method.name} answered {code.name} to {payload!r}"

    one()


def test_an_oversized_message_is_refused_and_the_driver_lives(target: Target) -> None:
    """5 MiB, past gRPC's default 4 MiB receive limit."""
    call = target.client.channel.unary_unary(
        "/csi.v1.Controller/CreateVolume",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x0a" + b"\x80\x80\x40" + b"x" * (5 << 20), timeout=RPC_TIMEOUT)
    assert info.value.code() == C.RESOURCE_EXHAUSTED
    _probe_ok(target)
