"""The whole suite, in one run against one plugin process: (a) the floor and (b) the driver's
lifecycle interleaved, (c) many volumes at once, (d) the ledger, (e) snapshots and clones, (f) the
plugin's memory, then the leak counts. Results go to OUT/bench.json and OUT/bench.md."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    cbt,
    concurrency,
    fastpaths,
    floor,
    ledger,
    lifecycle,
    pool_scale,
    report,
    scale,
    snapshot,
)
from bench.harness import GiB, Plugin, Stubs, force_cleanup, leaks, mounts_under, rss_idle
from bench.stats import summary

KINDS = ("ext4", "xfs", "block")
SECTIONS = (
    "fastpaths",
    "lifecycle",
    "many",
    "ledger",
    "snapshot",
    "group",
    "cbt",
    "scale",
    "pool",
    "concurrency",
)
TOOLS = ("truncate", "losetup", "mkfs.ext4", "mkfs.xfs", "mount", "umount", "blkid", "rm")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--out", default="bench-results", help="directory for bench.md/json")
    parser.add_argument("--samples", type=int, default=100, help="lifecycles per kind for (a), (b)")
    parser.add_argument("--size-gib", type=int, default=10, help="volume size for (a), (b), (c)")
    parser.add_argument("--volumes", type=int, default=100, help="volumes in (c)")
    parser.add_argument("--concurrency", type=int, default=8, help="parallel lifecycles in (c)")
    parser.add_argument("--ledger-rounds", type=int, default=300, help="latency rounds in (d)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients in (d)")
    parser.add_argument("--per-client", type=int, default=100, help="publishes per client (d)")
    parser.add_argument(
        "--scale-levels",
        default=",".join(str(n) for n in scale.LEVELS),
        help="staged volume counts for (h), comma-separated",
    )
    parser.add_argument("--scale-samples", type=int, default=20, help="rounds per level in (h)")
    parser.add_argument("--scale-size-gib", type=int, default=1, help="volume size for (h)")
    parser.add_argument(
        "--pool-levels",
        default=",".join(str(n) for n in pool_scale.LEVELS),
        help="volume counts in the pool for (i), comma-separated",
    )
    parser.add_argument("--pool-samples", type=int, default=50, help="rounds per level in (i)")
    parser.add_argument(
        "--concurrency-rounds", type=int, default=3, help="rounds of 100 CreateVolume in (j)"
    )
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})",
    )
    return parser.parse_args(argv)


def preflight() -> None:
    if os.geteuid() != 0:
        sys.exit("make bench needs root: it attaches loop devices and mounts filesystems")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        sys.exit(f"make bench needs these tools on PATH: {', '.join(missing)}")
    if not os.path.exists("/dev/loop-control"):
        sys.exit("make bench needs /dev/loop-control")


def floor_and_lifecycle(
    stubs: Stubs, work: Path, node_id: str, samples: int, size: int
) -> dict[str, Any]:
    """(a) and (b), interleaved kind by kind so both see the same machine; one warm-up each."""
    floors: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    drivers: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    floor_dir = work / "floor"
    for index in range(samples + 1):
        for kind in KINDS:
            f = floor.floor_once(floor_dir, kind, index, size)
            d = lifecycle.lifecycle(stubs, work, node_id, kind, f"life-{kind}-{index}", size)
            if index > 0:
                floors[kind].append(f)
                drivers[kind].append(d)
    out: dict[str, Any] = {}
    for kind in KINDS:
        out[kind] = {
            "floor": _steps_summary(floors[kind]),
            "driver": _steps_summary(drivers[kind]),
        }
    return out


def _steps_summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    names = list(runs[0]) if runs else []
    return {name: summary([r[name] for r in runs]) for name in names}


def _many(
    args: argparse.Namespace, stubs: Stubs, plugin: Plugin, work: Path, node_id: str
) -> dict[str, Any]:
    many = lifecycle.many(
        stubs,
        work,
        node_id,
        "ext4",
        args.size_gib * GiB,
        args.volumes,
        args.concurrency,
        plugin.pid,
    )
    pool = plugin.pool_dir
    left = leaks(
        work, node_id, [pool / "volumes", pool / "snapshots", work / "pods", work / "staging"]
    )
    return {
        "kind": "ext4",
        "volumes": args.volumes,
        "concurrency": args.concurrency,
        "wall_seconds": many.wall_seconds,
        "volumes_per_second": len(many.totals) / many.wall_seconds,
        "per_volume": summary(many.totals),
        "errors": many.errors,
        "leaks": left.as_dict(),
        "rss_peak_bytes": many.rss_peak,
        "rss_samples": many.rss_samples,
    }


def _ledger(args: argparse.Namespace, stubs: Stubs, plugin: Plugin, node_id: str) -> dict[str, Any]:
    lat = ledger.latencies(stubs, node_id, args.ledger_rounds)
    load = ledger.throughput(plugin.socket, node_id, args.clients, args.per_client)
    phases = (("bare", load.bare), ("publish", load.publish), ("unpublish", load.unpublish))
    return {
        "bare_rpc": lat.bare_name,
        "latency": {
            "bare": summary(lat.bare),
            "publish": summary(lat.publish),
            "unpublish": summary(lat.unpublish),
        },
        "throughput": {
            "clients": load.clients,
            "per_client": load.per_client,
            **{
                name: {
                    "calls": phase.calls,
                    "seconds": phase.seconds,
                    "per_second": phase.per_second,
                    "latency": summary(phase.latencies),
                    "errors": phase.errors,
                }
                for name, phase in phases
            },
        },
    }


def run_suite(args: argparse.Namespace, work: Path, node_id: str) -> dict[str, Any]:
    """Every section against one plugin; a section that fails is recorded and the rest run."""
    results: dict[str, Any] = {"errors": {}}

    wanted = set(args.only.split(","))
    unknown = wanted - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")

    def section(key: str, title: str, body: Callable[[], Any]) -> None:
        if key not in wanted:
            return
        print(title, flush=True)
        start = time.perf_counter()
        try:
            results[key] = body()
        except Exception as exc:  # noqa: BLE001 - recorded; the other sections still run
            results["errors"][key] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"  {key} failed: {results['errors'][key]}", file=sys.stderr, flush=True)
        print(f"  {time.perf_counter() - start:.1f} s", flush=True)

    # Before the plugin starts: its reconcile would claim loop devices that carry its tag.
    section(
        "fastpaths",
        "(0) the system layer's fast paths against mount(8), umount(8) and blkid ...",
        lambda: [
            vars(case) for case in fastpaths.check(work / "fastpaths", f"csihp-bench:{node_id}:")
        ],
    )
    # Thin volumes: (c) asks for 8 x 10 GiB at once, more than a shared disk may promise at the
    # driver's default --overcommit-ratio 1 (RESOURCE_EXHAUSTED is then correct, not a finding).
    plugin = Plugin(work / "plugin", node_id, extra=scale.PLUGIN_FLAGS)
    stubs = plugin.start()
    try:
        results["rss_idle_bytes"] = rss_idle(plugin.pid)
        section(
            "lifecycle",
            "(a)+(b) the floor and the driver's lifecycle, interleaved ...",
            lambda: floor_and_lifecycle(stubs, work, node_id, args.samples, args.size_gib * GiB),
        )
        section(
            "many",
            f"(c) {args.volumes} volumes, {args.concurrency} at a time ...",
            lambda: _many(args, stubs, plugin, work, node_id),
        )
        if "many" in results:
            results["rss_idle_after_load_bytes"] = rss_idle(plugin.pid)
        section("ledger", "(d) the ledger ...", lambda: _ledger(args, stubs, plugin, node_id))
        section(
            "snapshot",
            "(e) a snapshot and clones ...",
            lambda: snapshot.snapshot_and_clones(stubs, work, node_id, plugin.pool_dir),
        )
        section(
            "group",
            "(f) a group snapshot of four mounted volumes ...",
            lambda: cbt.group_snapshot(stubs, work / "group", node_id),
        )
    finally:
        stubs.close()
        plugin.stop()
    # Its own plugins: one on the default pool, one on an xfs reflink pool.
    section(
        "cbt",
        "(g) changed-block tracking: a 10 GiB volume with 100 MiB changed ...",
        lambda: cbt.changed_blocks(work / "cbt", node_id),
    )
    section(
        "scale",
        f"(h) node calls and restart with {args.scale_levels} volumes staged ...",
        lambda: scale.scale(
            work / "scale",
            node_id,
            tuple(int(n) for n in args.scale_levels.split(",")),
            args.scale_samples,
            args.scale_size_gib * GiB,
        ),
    )
    section(
        "pool",
        f"(i) CreateVolume and GetCapacity with {args.pool_levels} volumes in the pool ...",
        lambda: pool_scale.pool_scale(
            work / "pool",
            node_id,
            tuple(int(n) for n in args.pool_levels.split(",")),
            args.pool_samples,
        ),
    )
    section(
        "concurrency",
        "(j) 100 CreateVolume at once and one after another; RSS over 10,000 calls ...",
        lambda: concurrency.concurrency(work / "concurrency", node_id, args.concurrency_rounds),
    )
    log = plugin.log_tail(10**9).splitlines()
    results["plugin_log"] = {
        "warnings": sum(1 for line in log if "level=WARNING" in line),
        "errors": sum(1 for line in log if "level=ERROR" in line),
        "last_problems": [line for line in log if "level=WARNING" in line or "level=ERROR" in line][
            -5:
        ],
    }
    return results


def _git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    preflight()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(os.path.realpath(tempfile.mkdtemp(prefix="csihp-bench-")))
    node_id = f"bench-{uuid.uuid4().hex[:12]}"
    started = time.time()
    results: dict[str, Any] = {
        "meta": {
            "command": " ".join(
                [Path(sys.executable).name, "-m", "bench", *(argv or sys.argv[1:])]
            ),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "host_cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "commit": _git_commit(),
            "work_dir": str(work),
            "node_id": node_id,
            "load_average_start": os.getloadavg(),
            "args": vars(args),
        }
    }
    failed = ""
    try:
        results.update(run_suite(args, work, node_id))
    except Exception as exc:  # noqa: BLE001 - reported, and the cleanup below still runs
        failed = f"{type(exc).__name__}: {exc}"
        print(f"benchmark failed: {failed}", file=sys.stderr)
    finally:
        end = leaks(work, node_id, [work])
        # state.db, the plugin log and the like are the run's own bookkeeping, not leaks.
        plugins = (
            work / "plugin",
            work / "scale" / "plugin",
            work / "pool" / "plugin",
            work / "concurrency" / "plugin",
        )
        states = tuple(str(p) + "/" for p in plugins)
        files = [f for f in end.files if not f.startswith(states)]
        kept = [f"{s}state/pool/{d}/" for s in states for d in ("volumes", "snapshots", "leases")]
        pool_files = [f for f in end.files if f.startswith(tuple(kept))]
        results["leaks_end"] = {
            "loop_devices": len(end.loops),
            "mounts": len(end.mounts),
            "files": len(files) + len(pool_files),
            "details": {"loops": end.loops, "mounts": end.mounts, "files": files + pool_files},
        }
        force_cleanup(work, node_id)
        if mounts_under(work):  # never recurse into a mount that failed to come off
            print(f"left {work} in place: mounts remain under it", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
        results["meta"]["seconds"] = time.time() - started
        results["meta"]["load_average_end"] = os.getloadavg()
        results["meta"]["failed"] = failed
    (out / "bench.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    markdown = report.markdown(results)
    (out / "bench.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
    leaked = sum(results["leaks_end"][k] for k in ("loop_devices", "mounts", "files"))
    return 1 if failed or leaked or results.get("errors") else 0
