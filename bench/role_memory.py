"""What each role holds: a `serve --mode ROLE` process's resident memory and threads, idle and
after 1,000 calls, for each source tree given (so two trees are measured in the same run).

    python -m bench.role_memory [--source DIR ...] [--calls 1000] [--idle 5]

RSS is VmRSS and threads are Threads from /proc/PID/status, read after the socket answers Probe
ready and the process sat idle for --idle seconds, then again after --calls calls and the same
idle wait. The trees run from source as they are (this machine sets PYTHONDONTWRITEBYTECODE,
so nothing is compiled ahead). The calls, round robin: Probe and GetPluginInfo for every role;
NodeGetCapabilities and NodeGetInfo for a node; ControllerGetCapabilities, GetCapacity and
ListVolumes for a controller, and a CreateVolume then DeleteVolume of a 1 MiB volume (no loop
device, no mount). Memory does not depend on the machine's load; no time is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import MiB, Plugin, Stubs
from csi_hostpath._pb import csi_pb2 as pb
from csi_hostpath.client.csi_requests import mount_cap

ROLES = ("node", "controller", "all")


@dataclass(frozen=True)
class Held:
    rss_kib: int
    threads: int


@dataclass(frozen=True)
class RoleFigures:
    source: str
    role: str
    idle: Held
    busy: Held
    calls: int


def held(pid: int) -> Held:
    """VmRSS (KiB) and Threads, as the kernel counts them."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return Held(int(fields["VmRSS"].split()[0]), int(fields["Threads"]))


def _wait_probe(stubs: Stubs, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not stubs.identity.Probe(pb.ProbeRequest(), timeout=5).ready.value:
        if time.monotonic() > deadline:
            raise RuntimeError("the plugin never answered Probe ready")
        time.sleep(0.1)


def _calls(stubs: Stubs, role: str, node_id: str) -> list[Callable[[], object]]:
    calls: list[Callable[[], object]] = [
        lambda: stubs.identity.Probe(pb.ProbeRequest()),
        lambda: stubs.identity.GetPluginInfo(pb.GetPluginInfoRequest()),
    ]
    if role in ("node", "all"):
        calls += [
            lambda: stubs.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest()),
            lambda: stubs.node.NodeGetInfo(pb.NodeGetInfoRequest()),
        ]
    if role in ("controller", "all"):
        names = iter(range(1 << 30))
        created: list[str] = []

        def create() -> object:
            reply = stubs.controller.CreateVolume(
                pb.CreateVolumeRequest(
                    name=f"role-memory-{next(names)}",
                    capacity_range=pb.CapacityRange(required_bytes=MiB),
                    volume_capabilities=[mount_cap("ext4")],
                )
            )
            created.append(reply.volume.volume_id)
            return reply

        def delete() -> object:
            return stubs.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=created.pop()))

        calls += [
            lambda: stubs.controller.ControllerGetCapabilities(
                pb.ControllerGetCapabilitiesRequest()
            ),
            lambda: stubs.controller.GetCapacity(pb.GetCapacityRequest()),
            lambda: stubs.controller.ListVolumes(pb.ListVolumesRequest()),
            create,
            delete,
        ]
    return calls


def measure(
    source: Path, role: str, calls: int, idle: float, work: Path, metrics: bool = False
) -> RoleFigures:
    node_id = f"role-{uuid.uuid4().hex[:8]}"
    # PYTHONSAFEPATH: the tree is the one on PYTHONPATH, never the caller's working directory.
    env = {**os.environ, "PYTHONPATH": str(source), "PYTHONSAFEPATH": "1"}
    extra = ("--mode", role, *(("--metrics-address", "127.0.0.1:0") if metrics else ()))
    plugin = Plugin(work / f"{role}-{node_id}", node_id, extra=extra, env=env)
    try:
        stubs = plugin.start()
        try:
            _wait_probe(stubs)
            time.sleep(idle)
            before = held(plugin.pid)
            each = _calls(stubs, role, node_id)
            for index in range(calls):
                each[index % len(each)]()
            time.sleep(idle)
            after = held(plugin.pid)
        finally:
            stubs.close()
    finally:
        plugin.stop()
    return RoleFigures(str(source), role + (" +metrics" if metrics else ""), before, after, calls)


def table(figures: list[RoleFigures]) -> str:
    rows = [
        "| tree | role | idle RSS (MiB) | idle threads | RSS after calls (MiB) | threads after |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        rows.append(
            f"| {f.source} | {f.role} | {f.idle.rss_kib / 1024:.1f} | {f.idle.threads} "
            f"| {f.busy.rss_kib / 1024:.1f} | {f.busy.threads} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.role_memory", description=__doc__)
    parser.add_argument(
        "--source",
        action="append",
        type=Path,
        help="a source tree holding csi_hostpath/ to run (repeatable; default this one)",
    )
    parser.add_argument("--roles", default=",".join(ROLES), help="comma-separated roles")
    parser.add_argument("--calls", type=int, default=1000, help="calls after the idle figure")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before each read")
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="also each role with --metrics-address (the chart's default)",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench.role_memory needs root: the driver's state directory is root's")
    sources = [s.resolve() for s in args.source or [Path(__file__).resolve().parents[1]]]
    figures = []
    with tempfile.TemporaryDirectory(prefix="csihp-bench-roles-") as tmp:
        for role in args.roles.split(","):
            for metrics in (False, True) if args.metrics else (False,):
                for source in sources:  # alternate the trees, so both see the same machine
                    figures.append(measure(source, role, args.calls, args.idle, Path(tmp), metrics))
                    print(table(figures[-1:]).splitlines()[-1], flush=True)
    print(f"\n{args.calls} calls per role; idle {args.idle:g} s before each read\n")
    print(table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
