"""Chaos in the freeze window: snapshots, restores and clones of a mounted volume, for
test_chaos.py.

The split cluster there never freezes anything: its controller has no node in its process, so
its copies are crash-consistent. A `--mode all` driver does freeze: a snapshot or a clone of a
volume staged on it holds the volume's filesystem frozen (FIFREEZE) while the backing file is
copied. `SnapNode` is such a driver (node-c, its own pool, its own mount namespace) with one
volume staged and published to a long-lived pod for the whole run. Each of its lifecycles writes
to that volume, snapshots it, restores the snapshot and reads the data back, clones the volume
and reads the clone, and deletes what it made; test_chaos.py kills the driver -9 somewhere in
it. The driver's test hook holds every freeze HOLD_SECONDS, so a kill lands inside the freeze
window often.

Nothing may stay frozen: after every restart the source volume must take a write (with fsync)
within WRITABLE_WITHIN seconds, and no freeze record may be left. mountinfo can't say that: a
frozen filesystem looks mounted and healthy there.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client import csi_requests as rq
from tests.e2e.harness import PV, Attacher, Kubelet, Node, Pod, Provisioner
from tests.e2e.node_runtime import Plugin
from tests.support import helpers as h

# The driver's test hook (node_freeze.TEST_HOLD_ENV): every freeze is held this long.
HOLD_SECONDS = "0.15"
WRITABLE_WITHIN = 5.0
SIZE = 32 * h.MiB
DATA_BYTES = 256 * 1024

# (name, the process whose RPC the step makes, the step)
Step = tuple[str, str, Callable[[], object]]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot_source(snapshot_id: str) -> pb.VolumeContentSource:
    return pb.VolumeContentSource(
        snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id=snapshot_id)
    )


def volume_source(volume_id: str) -> pb.VolumeContentSource:
    return pb.VolumeContentSource(volume=pb.VolumeContentSource.VolumeSource(volume_id=volume_id))


@dataclass
class Pool:
    """The records a run keeps of one controller's pool: what was acknowledged and not deleted,
    and the checks that nothing of it was lost."""

    root: Path
    volumes: dict[str, str] = field(default_factory=dict)  # id -> name
    snapshots: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def lost(self, plugin: Plugin) -> list[str]:
        """Every acknowledged volume or snapshot whose backing file is gone from the pool or
        that its controller no longer lists."""
        lost = [v for v in self.volumes if not (self.root / "volumes" / f"{v}.img").exists()]
        lost += [s for s in self.snapshots if not (self.root / "snapshots" / f"{s}.img").exists()]
        listed = list_volumes(plugin)
        lost += [v for v in self.volumes if v not in listed]
        snaps = list_snapshots(plugin)
        lost += [s for s in self.snapshots if s not in snaps]
        back = (set(listed) | set(snaps)) & self.deleted
        assert not back, f"deleted volumes or snapshots listed again: {back}"
        # A crash leaves only what its window explains (removed or re-adopted at start):
        # nothing of a kill or a state loss is ever a stranger to the pool.
        strangers = sorted(p.name for p in (self.root / "quarantine").glob("*.img"))
        assert not strangers, f"quarantined after a crash: {strangers}"
        return lost


def _ids(plugin: Plugin, method: str, request: type, entry: Callable[[Any], str]) -> set[str]:
    """Every ID a paginated list RPC of the controller answers, page by page."""
    found: set[str] = set()
    token = ""
    while True:
        page = plugin.call("controller", method, request(max_entries=50, starting_token=token))
        found |= {entry(e) for e in page.entries}
        token = page.next_token
        if not token:
            return found


def list_volumes(plugin: Plugin) -> set[str]:
    return _ids(plugin, "ListVolumes", pb.ListVolumesRequest, lambda e: e.volume.volume_id)


def list_snapshots(plugin: Plugin) -> set[str]:
    return _ids(
        plugin,
        "ListSnapshots",
        pb.ListSnapshotsRequest,
        lambda e: e.snapshot.snapshot_id,
    )


def restore_steps(
    tag: str,
    controller: str,
    node: str,
    provisioner: Provisioner,
    attacher: Attacher,
    kubelet: Kubelet,
    pool: Pool,
    source: Callable[[], pb.VolumeContentSource],
    file_name: str,
    expected: Callable[[], str],
) -> list[Step]:
    """A volume made from `source` (a snapshot or a volume), attached, staged and published on
    `node`, its `file_name` read and compared with `expected`, then taken down and deleted."""
    pod = Pod(f"pod-{tag}")
    state: dict[str, object] = {}

    def pv() -> PV:
        volume = state["pv"]
        assert isinstance(volume, PV)
        return volume

    def ctx() -> dict[str, str]:
        value = state["ctx"]
        assert isinstance(value, dict)
        return value

    def provision() -> None:
        request = rq.create_volume(tag, h.mount_cap("ext4"), SIZE, source=source())
        response = provisioner.controller.call("controller", "CreateVolume", request)
        state["pv"] = PV(tag, response.volume, h.mount_cap("ext4"))
        pool.volumes[pv().handle] = tag

    def read() -> None:
        got = kubelet.read(pod, pv(), file_name)
        assert digest(got) == expected(), f"{tag}: {file_name} differs from what was written"

    def delete() -> None:
        provisioner.delete(pv())
        del pool.volumes[pv().handle]
        pool.deleted.add(pv().handle)

    return [
        (f"make {tag}", controller, provision),
        (f"attach {tag}", controller, lambda: state.update(ctx=attacher.attach(pv(), node))),
        (f"stage {tag} on {node}", node, lambda: kubelet.mount_device(pv(), ctx())),
        (f"publish {tag} on {node}", node, lambda: kubelet.setup(pod, pv(), ctx())),
        (f"read {tag} on {node}", node, read),
        (f"unpublish {tag} on {node}", node, lambda: kubelet.teardown(pod, pv())),
        (f"unstage {tag} on {node}", node, lambda: kubelet.unmount_device(pv())),
        (f"detach {tag}", controller, lambda: attacher.detach(pv(), node)),
        (f"delete {tag}", controller, delete),
    ]


def run_plain(steps: list[Step]) -> None:
    for _name, _owner, step in steps:
        step()


@dataclass
class SnapNode:
    node: Node
    pool: Pool
    rng: random.Random
    source: PV | None = None
    source_pod: Pod = field(default_factory=lambda: Pod("snap-source"))
    current: str = ""  # the digest of gen.bin as last written
    keeper: str = ""  # a snapshot taken at the start and kept to the end
    keeper_digest: str = ""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def plugin(self) -> Plugin:
        return self.node.plugin

    @property
    def kubelet(self) -> Kubelet:
        return self.node.kubelet

    @property
    def provisioner(self) -> Provisioner:
        return Provisioner(self.plugin)

    @property
    def attacher(self) -> Attacher:
        return Attacher(self.plugin, {self.name: self.node.node_id})

    def snapshot(self, name: str, volume_id: str) -> str:
        response = self.plugin.call(
            "controller", "CreateSnapshot", rq.create_snapshot(name, volume_id)
        )
        assert response.snapshot.ready_to_use
        snapshot_id = str(response.snapshot.snapshot_id)
        self.pool.snapshots[snapshot_id] = name
        return snapshot_id

    def delete_snapshot(self, snapshot_id: str) -> None:
        self.plugin.call("controller", "DeleteSnapshot", rq.delete_snapshot(snapshot_id))
        del self.pool.snapshots[snapshot_id]
        self.pool.deleted.add(snapshot_id)

    def paths(self) -> list[Path]:
        """The source volume's staging mount and the pod's target: the frozen candidates."""
        assert self.source is not None
        return [
            self.kubelet.staging_path(self.source),
            self.kubelet.target_path(self.source_pod, self.source),
        ]

    def start(self) -> None:
        cap = h.mount_cap("ext4")
        pv = self.provisioner.provision("snap-source", cap, SIZE)
        self.pool.volumes[pv.handle] = pv.name
        ctx = self.attacher.attach(pv, self.name)
        self.kubelet.mount_device(pv, ctx)
        self.kubelet.setup(self.source_pod, pv, ctx)
        self.source = pv
        data = self.rng.randbytes(DATA_BYTES)
        self.kubelet.write(self.source_pod, pv, "keeper.bin", data)
        self.keeper, self.keeper_digest = self.snapshot("keeper", pv.handle), digest(data)
        # The probe must see a freeze, or its "0 left frozen" would mean nothing.
        staging = self.paths()[0]
        self.kubelet.ns.run("fsfreeze", "-f", str(staging))
        try:
            assert not self.kubelet.writable(staging, 1), "the write probe missed a freeze"
        finally:
            self.kubelet.thaw_all([staging])
        assert self.kubelet.writable(staging, WRITABLE_WITHIN)

    def steps(self, i: int) -> list[Step]:
        """One lifecycle: write gen.bin to the source, snapshot it, restore the snapshot and
        read gen.bin back, clone the source and read gen.bin there, delete the snapshot."""
        assert self.source is not None
        source, me = self.source, self.name
        data = self.rng.randbytes(DATA_BYTES)
        made: dict[str, str] = {}

        def write() -> None:
            self.kubelet.write(self.source_pod, source, "gen.bin", data)
            self.current = digest(data)

        def snap() -> None:
            made["snap"] = self.snapshot(f"snap-{i}", source.handle)

        def expected() -> str:
            return self.current

        common = (self.provisioner, self.attacher, self.kubelet, self.pool)
        return [
            ("write source", me, write),
            ("snapshot", me, snap),
            *restore_steps(
                f"restore-{i}", me, me, *common, lambda: snapshot_source(made["snap"]),
                "gen.bin", expected,
            ),
            *restore_steps(
                f"clone-{i}", me, me, *common, lambda: volume_source(source.handle),
                "gen.bin", expected,
            ),
            ("delete snapshot", me, lambda: self.delete_snapshot(made["snap"])),
        ]  # fmt: skip

    def restore_keeper(self, tag: str) -> None:
        """After its state was lost: the snapshot taken at the start still restores, and its
        data reads back."""
        run_plain(
            restore_steps(
                tag, self.name, self.name, self.provisioner, self.attacher, self.kubelet,
                self.pool, lambda: snapshot_source(self.keeper), "keeper.bin",
                lambda: self.keeper_digest,
            )
        )  # fmt: skip

    def freeze_records(self) -> list[str]:
        """Freeze records left anywhere: the pool (POOL/frozen/<node-key>/) and the state
        directory (where older versions kept them)."""
        places = [self.pool.root / "frozen", self.plugin.state_dir / "frozen"]
        return sorted(str(p) for d in places for p in d.rglob("*.json"))
