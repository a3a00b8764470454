"""An adversary exchanges symbolic links into the CO's paths while the driver works on them.

A swapper process (swapper.py) exchanges, thousands of times, a target's parent, the target
itself, the staging path and its parent with symbolic links to victims' stand-ins: a directory
whose `mount` is a tmpfs holding data (a stand-in for /etc, or another pod's volume) and empty
directories (what a rmdir would take). Meanwhile the driver stages, publishes, unpublishes and
unstages one volume, 500 times each. After every call: the victims' mounts, data and directories
are as they were, and nothing of the volume's is mounted outside the kubelet's tree. Calls may
fail (a link in the path is refused); none may act through a link.

Failed on the old code (71b7c67): the check-then-use race was won within the first iterations,
the volume mounted over the victim's tmpfs (NodePublishVolume resolved the path again after its
symlink check), and NodeUnpublishVolume unmounted the victim's tmpfs through the swapped parent.
"""

from __future__ import annotations

import collections
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi_hostpath.client import csi_requests as rq
from csi_hostpath.system.linux.mountinfo import read_mountinfo
from tests.conftest import Client
from tests.real.swapper import Swapper
from tests.support import helpers as h
from tests.support.kernel import loops_backed_under

ROUNDS = 500
DATA = "the victim's own data\n"


@contextmanager
def _victim_tmpfs(path: Path) -> Iterator[None]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "csihp-victim", str(path)], check=True)
    try:
        (path / "data").write_text(DATA)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class World:
    """The kubelet's tree, the victims, and the checks made after every call."""

    def __init__(self, workdir: Path) -> None:
        self.kubelet = workdir / "kubelet"
        volumes = self.kubelet / "pods" / "uid" / "volumes"
        self.target_parent = volumes / "vol"
        self.target = self.target_parent / "mount"
        plugin = self.kubelet / "plugins" / "hash"
        self.staging = plugin / "globalmount"
        self.victim = workdir / "victim"  # stands in for /etc, or another pod's volume
        self.victim_mount = self.victim / "mount"  # where the target's name leads through it
        self.victim_staging = workdir / "victim2" / "globalmount"
        self.empty = [workdir / "victim" / "spare", workdir / "victim2" / "spare"]
        self.target_parent.mkdir(parents=True)
        plugin.mkdir(parents=True)
        self.staging.mkdir()
        for d in self.empty:
            d.mkdir(parents=True)
        self.links = {
            volumes / "vol-link": self.victim,
            self.target_parent / "mount-link": self.empty[0],
            plugin / "globalmount-link": self.empty[1],
            self.kubelet / "plugins" / "hash-link": self.victim_staging.parent,
        }
        for link, to in self.links.items():
            link.symlink_to(to)
        self.pairs = [
            (self.target_parent, volumes / "vol-link"),
            (self.target, self.target_parent / "mount-link"),
            (self.staging, plugin / "globalmount-link"),
            (plugin, self.kubelet / "plugins" / "hash-link"),
        ]

    def restore(self) -> None:
        for real, link in self.pairs:
            if not real.is_symlink():
                continue
            while subprocess.run(["umount", str(link)], check=False).returncode == 0:
                pass  # the volume's mounts on the real directory, now named like the link
            os.rename(link, real.with_name(real.name + ".real"))
            real.unlink()
            os.rename(real.with_name(real.name + ".real"), real)
            link.symlink_to(self.links[link])

    def check(self, root: Path, when: str) -> None:
        records = read_mountinfo()
        points = collections.Counter(r.entry.mount_point for r in records)
        victims = [str(self.victim_mount), str(self.victim_staging)]
        for victim in victims:
            assert points[victim] == 1, f"{when}: the victim's mount at {victim} changed"
            assert (Path(victim) / "data").read_text() == DATA, f"{when}: {victim} lost data"
            inside = [p for p in points if p.startswith(victim + "/")]
            assert not inside, f"{when}: mounted inside the victim: {inside}"
        for d in self.empty:
            assert d.is_dir() and not any(d.iterdir()), f"{when}: {d} was changed or removed"
            assert points[str(d)] == 0, f"{when}: the volume was mounted on the victim {d}"
        # The volume's device is whichever loop device its backing file is attached to now.
        devices = set(loops_backed_under(root))
        numbers = {f"7:{int(d.removeprefix('/dev/loop'))}" for d in devices}
        for r in records:
            if r.entry.source in devices or r.entry.device_number in numbers:
                assert r.entry.mount_point.startswith(str(self.kubelet) + "/"), (
                    f"{when}: the volume is mounted at {r.entry.mount_point}, outside the "
                    "kubelet's tree"
                )


def _call(codes: collections.Counter[str], call: Callable[[Any], Any], request: Any) -> None:
    try:
        call(request)
        codes["OK"] += 1
    except grpc.RpcError as e:
        codes[e.code().name] += 1


@pytest.mark.timeout(1800)
def test_no_swap_makes_the_driver_act_outside_the_volumes_paths(
    driver: Client, workdir: Path
) -> None:
    world = World(workdir)
    cap = h.mount_cap("ext4")
    vol = h.create(driver, "swapped", cap)
    ctx = h.publish(driver, vol.volume_id, "node-a", cap)
    h.stage(driver, vol, world.staging, cap, ctx)  # formatted once, before the race
    h.unstage(driver, vol.volume_id, world.staging)
    pool = workdir / "drv-state"
    codes: collections.Counter[str] = collections.Counter()
    node = driver.node
    with _victim_tmpfs(world.victim_mount), _victim_tmpfs(world.victim_staging):
        swapper = Swapper(world.pairs)
        try:
            for i in range(ROUNDS):
                stage = rq.node_stage(vol.volume_id, world.staging, cap, ctx, vol.volume_context)
                publish = rq.node_publish(vol.volume_id, world.staging, world.target, cap)
                for name, request in (
                    ("NodeStageVolume", stage),
                    ("NodePublishVolume", publish),
                    ("NodeUnpublishVolume", rq.node_unpublish(vol.volume_id, world.target)),
                    ("NodeUnstageVolume", rq.node_unstage(vol.volume_id, world.staging)),
                ):
                    _call(codes, getattr(node, name), request)
                    world.check(pool, f"round {i}, after {name}")
        finally:
            swaps = swapper.stop()
        # A pair the swapper left exchanged while the volume was mounted on the real one (a mount
        # point can't be renamed back) is repaired as the driver's answer tells an operator to:
        # unmount it where it really is, then put the CO's directory back.
        world.restore()
        h.node_unpublish(driver, vol.volume_id, world.target)
        h.unstage(driver, vol.volume_id, world.staging)
        world.check(pool, "after the race")
    print(f"{swaps} exchanges, {ROUNDS} rounds; answers {dict(codes)}")
    assert swaps >= 1000, f"only {swaps} exchanges: the race was not run"
    assert not loops_backed_under(pool), "the volume's loop device outlived its unstage"
