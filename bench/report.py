"""bench.json → bench.md: one table of the figures and targets, then the per-step breakdowns."""

from __future__ import annotations

import math
from typing import Any

from bench import concurrency
from bench.stats import ratio

MB = 1_000_000
MiB = 1 << 20

# The targets.
LIFECYCLE_MAX_RATIO = 1.5
LEDGER_MAX_RATIO = 3.0
PUBLISHES_PER_SECOND = 300.0
SNAPSHOT_SECONDS = 1.0
IDLE_RSS_BYTES = 80 * MB
SCALE_MAX_GROWTH = 1.3
SCALE_RESTART_SECONDS = 2.0
SCALE_CALLS = (
    "ControllerPublishVolume",
    "NodeStageVolume",
    "NodePublishVolume",
    "NodeUnpublishVolume",
    "NodeUnstageVolume",
)

_FLOOR_STEPS = {
    "ext4": "truncate → losetup → mkfs.ext4 → mount → umount → losetup -d → rm",
    "xfs": "truncate → losetup → mkfs.xfs → mount → umount → losetup -d → rm",
    "block": "truncate → losetup → losetup -d → rm",
}


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def _verdict(ok: bool | None) -> str:
    if ok is None:
        return "n/a"
    return "**met**" if ok else "**missed**"


def _mb(value: int) -> str:
    return f"{value / MB:.1f} MB ({value / MiB:.1f} MiB)"


def _bytes(value: int | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= MiB:
        return f"{value / MiB:.1f} MiB"
    return f"{value / 1024:.0f} KiB"


class _Table:
    def __init__(self) -> None:
        self.rows: list[str] = [
            "| | Figure | Measured | Target | Verdict |",
            "|---|---|---|---|---|",
        ]

    def add(
        self, part: str, figure: str, measured: str, target: str = "", verdict: str = ""
    ) -> None:
        self.rows.append(f"| {part} | {figure} | {measured} | {target} | {verdict} |")


def _fastpath_rows(table: _Table, results: dict[str, Any]) -> None:
    cases = results.get("fastpaths")
    if not cases:
        return
    same = sum(1 for c in cases if c["same"])
    fast = sum(1 for c in cases if c["fast"])
    table.add(
        "0",
        "system-layer fast paths (mount(2), umount2(2), probe without blkid) give what "
        "mount(8), umount(8) and blkid give",
        f"{same} of {len(cases)} cases identical; {fast} took the fast path",
        "all identical",
        _verdict(same == len(cases)),
    )


def _lifecycle_rows(table: _Table, results: dict[str, Any]) -> None:
    life = results.get("lifecycle", {})
    for kind, data in life.items():
        f = data["floor"]["total"]
        table.add(
            "a",
            f"floor {kind}: {_FLOOR_STEPS[kind]}",
            f"p50 {_ms(f['p50_ms'])}, p95 {_ms(f['p95_ms'])}",
        )
    for kind, data in life.items():
        f, d = data["floor"]["total"], data["driver"]["total"]
        r50, r95 = ratio(d["p50_ms"], f["p50_ms"]), ratio(d["p95_ms"], f["p95_ms"])
        label = "block" if kind == "block" else f"mount {kind}"
        table.add(
            "b",
            f"driver lifecycle, {label} (8 RPCs)",
            f"p50 {_ms(d['p50_ms'])} (**{r50:.2f}x** floor), "
            f"p95 {_ms(d['p95_ms'])} ({r95:.2f}x floor)",
            f"p50 ≤ {LIFECYCLE_MAX_RATIO}x floor",
            _verdict(r50 <= LIFECYCLE_MAX_RATIO),
        )


def _many_rows(table: _Table, results: dict[str, Any]) -> None:
    many = results.get("many")
    if not many:
        return
    per = many["per_volume"]
    table.add(
        "c",
        f"{many['volumes']} {many['kind']} volumes through the lifecycle, "
        f"{many['concurrency']} at a time",
        f"wall {many['wall_seconds']:.2f} s ({many['volumes_per_second']:.1f} volumes/s); "
        f"per volume p50 {_ms(per['p50_ms'])}, p95 {_ms(per['p95_ms'])}; "
        f"errors {len(many['errors'])}",
        "no errors",
        _verdict(not many["errors"]),
    )
    lk = many["leaks"]
    table.add(
        "c",
        "left behind by (c): loop devices / mounts / files",
        f"{lk['loop_devices']} / {lk['mounts']} / {lk['files']}",
        "0 / 0 / 0",
        _verdict(lk["loop_devices"] + lk["mounts"] + lk["files"] == 0),
    )


def _ledger_rows(table: _Table, results: dict[str, Any]) -> None:
    led = results.get("ledger")
    if not led:
        return
    lat, load = led["latency"], led["throughput"]
    bare = lat["bare"]
    table.add(
        "d",
        f"bare gRPC round trip ({led['bare_rpc']}), 1 client",
        f"p50 {_ms(bare['p50_ms'])}, p95 {_ms(bare['p95_ms'])}",
    )
    for name, rpc in (
        ("publish", "ControllerPublishVolume"),
        ("unpublish", "ControllerUnpublishVolume"),
    ):
        d = lat[name]
        r = ratio(d["p50_ms"], bare["p50_ms"])
        table.add(
            "d",
            f"{rpc} (durable), 1 client",
            f"p50 {_ms(d['p50_ms'])} (**{r:.1f}x** bare), p95 {_ms(d['p95_ms'])} "
            f"({ratio(d['p95_ms'], bare['p95_ms']):.1f}x bare)",
            f"p50 ≤ {LEDGER_MAX_RATIO:.0f}x bare",
            _verdict(r <= LEDGER_MAX_RATIO),
        )
    clients = load["clients"]
    b = load["bare"]
    table.add(
        "d",
        f"bare round trip, {clients} clients",
        f"{b['per_second']:.0f} calls/s; p50 {_ms(b['latency']['p50_ms'])}, "
        f"p95 {_ms(b['latency']['p95_ms'])}",
    )
    for name, rpc, target in (
        ("publish", "ControllerPublishVolume", True),
        ("unpublish", "ControllerUnpublishVolume", False),
    ):
        p = load[name]
        errors = f"; errors {len(p['errors'])}" if p["errors"] else ""
        table.add(
            "d",
            f"{rpc}, {clients} clients",
            f"**{p['per_second']:.0f}/s** ({ratio(p['per_second'], b['per_second']):.2f}x "
            f"bare throughput); p50 {_ms(p['latency']['p50_ms'])}, "
            f"p95 {_ms(p['latency']['p95_ms'])}{errors}",
            f"≥ {PUBLISHES_PER_SECOND:.0f}/s" if target else "",
            _verdict(p["per_second"] >= PUBLISHES_PER_SECOND and not p["errors"]) if target else "",
        )


def _snapshot_rows(table: _Table, results: dict[str, Any]) -> None:
    snap = results.get("snapshot")
    if not snap:
        return
    what = (
        f"{snap['source_size_bytes'] // (1 << 30)} GiB ext4 volume, "
        + _bytes(snap["written_bytes"])
        + " written"
    )
    for key, figure, target in (
        ("snapshot", f"CreateSnapshot of a {what}", True),
        ("restore_from_snapshot", "CreateVolume from that snapshot", False),
        ("clone_from_volume", "CreateVolume from that volume (clone)", False),
    ):
        o = snap[key]
        if o["status"] != "ok":
            measured, ok = o["status"], None
        else:
            measured = f"{o['seconds'] * 1000:.0f} ms, new disk {_bytes(o['new_disk_bytes'])}"
            if "source_disk_used_bytes" in o:
                measured += f" (the source uses {_bytes(o['source_disk_used_bytes'])})"
            if o.get("data_verified") is not None:
                measured += f", data {'verified' if o['data_verified'] else '**differs**'}"
            ok = o["seconds"] < SNAPSHOT_SECONDS
        table.add(
            "e",
            figure,
            measured,
            f"< {SNAPSHOT_SECONDS:.0f} s" if target else "",
            _verdict(ok) if target else "",
        )


def _group_and_cbt_rows(table: _Table, results: dict[str, Any]) -> None:
    group = results.get("group")
    if group:
        table.add(
            "f",
            f"CreateVolumeGroupSnapshot of {group['members']} mounted 1 GiB ext4 volumes "
            "(all frozen at one point); floor: one CreateSnapshot each",
            f"{group['seconds'] * 1000:.0f} ms (floor {group['floor_seconds'] * 1000:.0f} ms, "
            f"{group['seconds'] / group['floor_seconds']:.2f}x)",
        )
    for pool, figures in (results.get("cbt") or {}).items():
        target = pool == "xfs-reflink"
        exact = figures["exact"]
        table.add(
            "g",
            f"GetMetadataDelta, 10 GiB volume, 1 GiB written, 100 MiB changed, {pool} pool; "
            "floor: read every allocated block of both snapshots",
            f"{figures['seconds'] * 1000:.0f} ms (floor {figures['floor_seconds'] * 1000:.0f} ms), "
            f"answer {'exact' if exact else '**wrong**'}",
            "< 1 s, exact" if target else "exact",
            _verdict(exact and (figures["seconds"] < 1.0 or not target)),
        )


def _rss_rows(table: _Table, results: dict[str, Any]) -> None:
    if "rss_idle_bytes" in results:
        idle = results["rss_idle_bytes"]
        table.add(
            "f",
            "plugin RSS, idle (after start)",
            _mb(idle),
            "≤ 80 MB",
            _verdict(idle <= IDLE_RSS_BYTES),
        )
    if "many" in results:
        table.add("f", "plugin RSS, peak under (c)", _mb(results["many"]["rss_peak_bytes"]))
    if "rss_idle_after_load_bytes" in results:
        table.add("f", "plugin RSS, idle after (c)", _mb(results["rss_idle_after_load_bytes"]))


def _breakdown(results: dict[str, Any]) -> list[str]:
    life = results.get("lifecycle", {})
    if not life:
        return []
    lines = ["", "### Per-step p50 (ms)", ""]
    kinds = list(life)
    lines.append("| Driver RPC | " + " | ".join(kinds) + " |")
    lines.append("|---|" + "---|" * len(kinds))
    steps = list(life[kinds[0]]["driver"])
    for step in steps:
        cells = [
            f"{life[k]['driver'][step]['p50_ms']:.2f}" if step in life[k]["driver"] else "—"
            for k in kinds
        ]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines += ["", "| Floor step | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    floor_steps = list(life[kinds[0]]["floor"])
    for step in floor_steps:
        cells = [
            f"{life[k]['floor'][step]['p50_ms']:.2f}" if step in life[k]["floor"] else "—"
            for k in kinds
        ]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def _scale_rows(table: _Table, results: dict[str, Any]) -> None:
    data = results.get("scale")
    if not data or not data.get("levels"):
        return
    levels = sorted(data["levels"], key=int)
    low, high = levels[0], levels[-1]
    for rpc in SCALE_CALLS:
        p50 = {n: data["levels"][n]["calls"][rpc]["p50_ms"] for n in levels}
        growth = ratio(p50[high], p50[low])
        table.add(
            "h",
            f"{rpc} p50 with {' / '.join(levels)} ext4 volumes staged",
            " / ".join(_ms(p50[n]) for n in levels) + f" (**{growth:.2f}x** at {high})",
            f"p50 at {high} ≤ {SCALE_MAX_GROWTH}x p50 at {low}",
            _verdict(growth <= SCALE_MAX_GROWTH),
        )
    mount = data.get("mount", {}).get("p50_ms", math.nan)
    table.add("h", "mount(2) of an ext4 loop device, called directly", f"p50 {_ms(mount)}")
    for n in levels:
        seconds = data["levels"][n]["restart_seconds"]
        budget = SCALE_RESTART_SECONDS + int(n) * mount / 1000.0
        target = f"≤ {SCALE_RESTART_SECONDS:.0f} s + {n} x mount(2) = {budget:.2f} s"
        table.add(
            "h",
            f"restart until Probe is ready, {n} staged",
            f"{seconds:.2f} s",
            target if n == high else "",
            _verdict(seconds <= budget) if n == high else "",
        )


POOL_MAX_GROWTH = 1.5


def _pool_rows(table: _Table, results: dict[str, Any]) -> None:
    data = results.get("pool")
    if not data or not data.get("levels"):
        return
    levels = sorted(data["levels"], key=int)
    low, high = levels[0], levels[-1]
    for rpc in ("CreateVolume", "GetCapacity"):
        p50 = {n: data["levels"][n][rpc]["p50_ms"] for n in levels}
        growth = ratio(p50[high], p50[low])
        target = f"p50 at {high} ≤ {POOL_MAX_GROWTH}x p50 at {low}" if rpc == "CreateVolume" else ""
        table.add(
            "i",
            f"{rpc} p50 with {' / '.join(levels)} block volumes in the pool",
            " / ".join(_ms(p50[n]) for n in levels) + f" (**{growth:.2f}x** at {high})",
            target,
            _verdict(growth <= POOL_MAX_GROWTH) if target else "",
        )


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    table = _Table()
    _fastpath_rows(table, results)
    _lifecycle_rows(table, results)
    _many_rows(table, results)
    _ledger_rows(table, results)
    _snapshot_rows(table, results)
    _group_and_cbt_rows(table, results)
    _rss_rows(table, results)
    _scale_rows(table, results)
    _pool_rows(table, results)
    for figure, measured, target, verdict in concurrency.rows(results.get("concurrency") or {}):
        table.add("j", figure, measured, target, _verdict(verdict == "met") if verdict else "")
    plugin_log = results.get("plugin_log")
    if plugin_log:
        table.add(
            "—",
            "plugin log over the whole run: WARNING / ERROR lines",
            f"{plugin_log['warnings']} / {plugin_log['errors']}",
        )
    end = results.get("leaks_end")
    if end:
        table.add(
            "—",
            "left behind by the whole run (losetup -a, /proc/self/mountinfo, pool and work "
            "directory): loop devices / mounts / files",
            f"{end['loop_devices']} / {end['mounts']} / {end['files']}",
            "0 / 0 / 0",
            _verdict(end["loop_devices"] + end["mounts"] + end["files"] == 0),
        )
    lines = [
        "## Benchmark results",
        "",
        f"`{meta['command']}` at commit {meta['commit']}, {meta['started']}: "
        f"{meta['host_cpus']} CPUs, Linux {meta['kernel']}, Python {meta['python']}; "
        f"the run took {meta.get('seconds', 0):.0f} s.",
        "",
    ]
    if "load_average_end" in meta:
        start, end = meta["load_average_start"], meta["load_average_end"]
        lines += [
            f"Load average (1, 5, 15 min) at the start {start[0]:.2f}, {start[1]:.2f}, "
            f"{start[2]:.2f}; at the end {end[0]:.2f}, {end[1]:.2f}, {end[2]:.2f}.",
            "",
        ]
    if meta.get("failed"):
        lines += [f"**The run failed:** {meta['failed']}", ""]
    for key, error in results.get("errors", {}).items():
        lines += [f"**Section {key} failed:** {error}", ""]
    lines += table.rows
    lines += _breakdown(results)
    return "\n".join(lines) + "\n"
