"""What the checks read, and only reads: each kind node's mount table (docker exec), the host's
loop devices (sysfs; their tags at rest), the pool's files, the driver's ledger and the API's
objects. Every read is a subprocess (kubectl, docker, the ledger CLI), so the background sampler
and the chaos run's threads may read beside the main thread."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from csi_hostpath.system.base import MountEntry
from csi_hostpath.system.linux import parse_mountinfo
from tests.k8s.experiments.context import CONTROLLER_STATE, DRIVER, POOL
from tests.k8s.experiments.kube import Failed, Kube, until
from tests.k8s.experiments.nodes import Nodes, _run
from tests.k8s.faults import invariants as inv

SYS_BLOCK = Path("/sys/block")
T = TypeVar("T")


@dataclass
class Observer:
    kube: Kube
    nodes: Nodes
    # Every node of the cluster (its mounts are read), and the release.
    node_names: list[str]
    driver_ns: str
    release: str
    # The shared pool as the host sees it; the controller's state directory there, when the
    # ledger is read on the host rather than in the controller pod.
    pool_dir: Path
    ledger_state: Path | None = None
    # What the checks at rest found before the run (an earlier run's leftovers): reported once
    # at the start, not held against any row of this run.
    known: set[str] = field(default_factory=set)
    _controller: str = field(default="", init=False)

    def mounts(self, node: str) -> list[MountEntry]:
        text = self.nodes.exec(node, ["cat", "/proc/self/mountinfo"], timeout=20)
        return [r.entry for r in parse_mountinfo(text)]

    def all_mounts(self, strict: bool = True) -> dict[str, list[MountEntry]]:
        """Every node's mounts; not strict, a node that can't be read (stopped) is left out."""
        found = {}
        for n in self.node_names:
            try:
                found[n] = self.mounts(n)
            except (subprocess.SubprocessError, OSError):
                if strict:
                    raise
        return found

    def use(self, mounts: dict[str, list[MountEntry]] | None = None) -> dict[str, dict[str, bool]]:
        """volume -> {node: read-write?} now (one read of each node, then of the host's loops)."""
        seen = self.all_mounts() if mounts is None else mounts
        return inv.node_use(seen, inv.loop_volumes(host_loops()))

    def ledger_text(self) -> str:
        if self.ledger_state is not None:
            return _run(
                [
                    sys.executable,
                    "-m",
                    "csi_hostpath",
                    "ledger",
                    "list",
                    "--state-dir",
                    str(self.ledger_state),
                    "--pool-dir",
                    str(self.pool_dir),
                ],
            )
        if not self._controller:
            self._controller = self.kube.kubectl(
                "-n",
                self.driver_ns,
                "get",
                "pods",
                "-o",
                "jsonpath={.items[0].metadata.name}",
                "-l",
                f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component=controller",
                timeout=30,
            ).strip()
        try:
            return self.kube.kubectl(
                "-n",
                self.driver_ns,
                "exec",
                self._controller,
                "-c",
                "csi-hostpath",
                "--",
                "csi-hostpath",
                "ledger",
                "list",
                "--state-dir",
                CONTROLLER_STATE,
                "--pool-dir",
                POOL,
                timeout=30,
            )
        except subprocess.CalledProcessError:
            self._controller = ""  # maybe another pod now: find it again next time
            raise

    def holds(self) -> list[inv.Hold]:
        return inv.parse_ledger_list(self.ledger_text())

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        where = ["-n", namespace] if namespace else ["-A"]
        out = self.kube.kubectl("get", kind, *where, "-o", "json", timeout=60)
        return list(json.loads(out).get("items") or [])

    def handles(self) -> dict[str, str]:
        return inv.pv_handles(self.objects("persistentvolumes"), DRIVER)

    def attached(self, handles: dict[str, str] | None = None) -> set[tuple[str, str]]:
        h = self.handles() if handles is None else handles
        return inv.attached(self.objects("volumeattachments"), h, DRIVER)

    def snapshot_handles(self) -> set[str]:
        return {
            str((c.get("status") or {}).get("snapshotHandle"))
            for c in self.objects("volumesnapshotcontents")
            if (c.get("spec") or {}).get("driver") == DRIVER
        }

    def pool_ids(self, sub: str) -> set[str]:
        d = self.pool_dir / sub
        return {p.name[: -len(".img")] for p in d.glob("*.img")} if d.is_dir() else set()

    def at_rest(self, before: dict[str, set[str]]) -> list[inv.Violation]:
        """Every check that needs the cluster quiet: leaked loop devices, mounts and pool files,
        and the ledger against the VolumeAttachments. `before`: the pool's files at the start."""
        mounts = self.all_mounts()
        use = inv.in_use(inv.node_use(mounts, inv.loop_volumes(host_loops())))
        handles = self.handles()
        found = inv.leaked_loops(tagged_loops(), self.node_names, use)
        targets = {n: inv.csi_targets(m) for n, m in mounts.items()}
        found += inv.leaked_mounts(targets, handles, handles.values())
        found += inv.orphan_files(
            self.pool_ids("volumes"), handles.values(), before.get("volumes", set())
        )
        found += inv.orphan_files(
            self.pool_ids("snapshots"),
            self.snapshot_handles(),
            before.get("snapshots", set()),
            "snapshot",
        )
        found += inv.ledger_disagreements(self.holds(), self.attached(handles))
        return [v for v in found if v.detail not in self.known]

    def pool_files(self) -> dict[str, set[str]]:
        return {"volumes": self.pool_ids("volumes"), "snapshots": self.pool_ids("snapshots")}

    def settled(self, before: dict[str, set[str]], timeout: float) -> list[inv.Violation]:
        return settle(lambda: self.at_rest(before), timeout)

    def agreement(self, timeout: float) -> list[inv.Violation]:
        return settle(
            lambda: [
                v
                for v in inv.ledger_disagreements(self.holds(), self.attached())
                if v.detail not in self.known
            ],
            timeout,
        )


def settle(check: Callable[[], list[inv.Violation]], timeout: float) -> list[inv.Violation]:
    """The check again until it finds nothing or `timeout` passes (a detach, a deletion or a
    fence may still be on its way): what it still finds then is a violation, and so is a check
    that could not read."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            found = [inv.Violation("unread", f"the check could not read: {e}")]
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(5)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def host_loops(root: Path = SYS_BLOCK) -> list[inv.HostLoop]:
    """The host kernel's loop devices from sysfs: no device is opened (an open delays a
    release, docs/design.md "A detach touches only the device it was given")."""
    found = []
    for entry in sorted(root.glob("loop[0-9]*")):
        found.append(
            inv.HostLoop(entry.name, _read(entry / "dev"), _read(entry / "loop" / "backing_file"))
        )
    return found


def tagged_loops() -> list[tuple[str, str]]:
    """(device, tag) of every bound loop device: opens each one, so only at rest."""
    from csi_hostpath.system.linux.loop_ioctl import loop_devices, read_tag

    found = []
    for index, bound in loop_devices():
        if bound:
            try:
                tag = read_tag(f"/dev/loop{index}")
            except OSError:
                continue
            if tag:
                found.append((f"/dev/loop{index}", tag))
    return found


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    """e2e's `until`, whatever the probe raises meanwhile: during a fault the API server, a node
    or a pod may be away, and the client's connection errors are no Failed."""

    def tolerant() -> T | None:
        try:
            return probe()
        except Failed:
            raise
        except Exception as e:  # the fault may make any read fail for a while
            raise Failed(f"{type(e).__name__}: {str(e).strip()[-300:]}") from e

    return until(what, tolerant, timeout, interval)
