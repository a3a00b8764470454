"""Where the plugin spends an RPC's wall time: py-spy samples a real plugin while a workload runs.

    python -m bench.profile {ext4,xfs,block,ledger,scale} [--count N] [--rate HZ] [--top N]

scale: the node calls of (h) (publish, stage, publish, unpublish, unstage, unpublish of a
formatted volume) with --staged ext4 volumes staged beside it (default 500).

py-spy (`pip install py-spy`, `make bench-profile` does it) records every thread, idle or not
(--idle), so time spent waiting on a child process, an fsync or a lock counts as it does for the
caller. Only samples inside an RPC handler (below grpc's _call_behavior) are kept, and each
function's inclusive samples are turned into milliseconds per operation (per lifecycle, or per
publish+unpublish pair), so the figures add up against bench.md's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from bench import ledger, lifecycle, scale
from bench.harness import GiB, Plugin, Stubs, force_cleanup, mounts_under

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^()]*?)(?::\d+)?\)$")
_IN_RPC = "_call_behavior"


def _frames(stack: str) -> list[str]:
    """'func (file:line)' frames → 'func (file)' names, root first, without the thread frame."""
    names = []
    for frame in stack.split(";")[1:]:
        match = _FRAME.match(frame)
        names.append(f"{match['func']} ({match['file']})" if match else frame)
    return names


def analyse(raw: str, rate: float, ops: int, top: int) -> str:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    per_rpc: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack.startswith("thread") or _IN_RPC not in stack:
            continue
        count = int(count_text)
        frames = _frames(stack)
        start = next(i for i, f in enumerate(frames) if f.startswith(_IN_RPC))
        frames = frames[start + 1 :]
        total += count
        for name in set(frames):
            inclusive[name] += count
        if frames:
            leaf[frames[-1]] += count
        rpc = next((f for f in frames if "Servicer." in f), "?")
        per_rpc[rpc.split(" ")[0]] += count

    def ms(samples: int) -> float:
        return samples / rate / ops * 1000.0

    lines = [
        f"{total} samples inside RPC handlers at {rate:.0f} Hz over {ops} operations: "
        f"{ms(total):.2f} ms of handler wall time per operation",
        "",
        "per RPC (ms/op):",
    ]
    lines += [f"  {ms(c):7.2f}  {name}" for name, c in per_rpc.most_common()]
    lines += ["", f"top {top} functions by inclusive wall time (ms/op, % of handler time):"]
    lines += [
        f"  {ms(c):7.2f} {100.0 * c / max(total, 1):5.1f}%  {name}"
        for name, c in inclusive.most_common(top)
    ]
    lines += ["", f"top {top} leaves (where the time is actually spent):"]
    lines += [
        f"  {ms(c):7.2f} {100.0 * c / max(total, 1):5.1f}%  {name}"
        for name, c in leaf.most_common(top)
    ]
    return "\n".join(lines)


def _workload(
    scenario: str, stubs: Stubs, work: Path, node_id: str, count: int, probes: list[str]
) -> None:
    if scenario == "scale":
        for index in range(count):
            scale.one_round(stubs, work, node_id, probes[index % len(probes)], index % len(probes))
        return
    if scenario == "ledger":
        ledger.latencies(stubs, node_id, count, warmup=0)
        return
    for index in range(count):
        lifecycle.lifecycle(stubs, work, node_id, scenario, f"prof-{index}", 10 * GiB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("scenario", choices=["ext4", "xfs", "block", "ledger", "scale"])
    parser.add_argument("--staged", type=int, default=500, help="volumes staged for scale")
    parser.add_argument("--count", type=int, default=0, help="operations (default per scenario)")
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--raw", help="also keep py-spy's collapsed stacks in this file")
    args = parser.parse_args(argv)
    count = args.count or (400 if args.scenario == "ledger" else 40)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy (or make bench-profile)")
    work = Path(tempfile.mkdtemp(prefix="csihp-bench-"))
    node_id = f"bench-{uuid.uuid4().hex[:12]}"
    plugin = Plugin(work / "plugin", node_id, extra=scale.PLUGIN_FLAGS)
    stubs = plugin.start()
    raw_path = work / "spy.txt"
    probes: list[str] = []
    try:
        if args.scenario == "scale":
            probes = scale.make_probes(stubs, work, node_id, 8, GiB)
            scale.stage_many(stubs, work, node_id, range(args.staged), GiB)
        _workload(args.scenario, stubs, work, node_id, 3, probes)  # warm-up, not sampled
        recorder = subprocess.Popen(
            [
                *(spy, "record", "--idle", "--threads", "--format", "raw"),
                *("--rate", str(args.rate), "--pid", str(plugin.pid), "--output", str(raw_path)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # py-spy attaches
        _workload(args.scenario, stubs, work, node_id, count, probes)
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)
        raw = raw_path.read_text()
        if args.raw:
            Path(args.raw).write_text(raw)
        print(f"scenario {args.scenario}: ")
        print(analyse(raw, args.rate, count, args.top))
    finally:
        stubs.close()
        plugin.stop()
        force_cleanup(work, node_id)
        if not mounts_under(work):
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
