"""What a run found: one row per cell (or partition case), the matrix as a grid of components by
phases, and a JSON file written after every row, so a run stopped half-way still says what it
ran."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.k8s.faults import invariants as inv
from tests.k8s.faults.matrix import COMPONENTS, OFF_PATH, PHASES


@dataclass
class CellResult:
    id: str  # component/phase, or partition/MODE
    # passed, FAILED, or skipped (not reached).
    outcome: str
    seconds: float
    # in-phase: the phase was not done yet when the kill landed; late: it was (the cell then
    # tested the fault after the phase, not in it); "": no kill (a partition case).
    landed: str = ""
    # From the kill until the component ran again and answered.
    back_seconds: float = 0.0
    detail: str = ""
    violations: list[dict[str, Any]] = field(default_factory=list)
    samples: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "passed"

    def add(self, found: Sequence[inv.Violation]) -> None:
        self.violations += [asdict(v) for v in found]


def render(results: Sequence[CellResult]) -> str:
    """One line per cell in run order, then the counts: run, passed, failed, landed late."""
    headers = ("cell", "result", "landed", "back s", "seconds", "detail")
    rows = [
        (
            r.id,
            r.outcome,
            r.landed,
            f"{r.back_seconds:.0f}" if r.landed else "",
            f"{r.seconds:.0f}",
            _first(r.detail) or (_violation(r.violations[0]) if r.violations else ""),
        )
        for r in results
    ]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if i in (3, 4) else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    lines.append(summary(results))
    return "\n".join(lines)


def summary(results: Sequence[CellResult]) -> str:
    ran = [r for r in results if r.outcome != "skipped"]
    passed = sum(r.ok for r in ran)
    late = sum(r.landed == "late" for r in ran)
    return (
        f"{len(ran)} run, {passed} passed, {len(ran) - passed} failed, "
        f"{len(results) - len(ran)} skipped; {late} of the kills landed after their phase; "
        f"{sum(r.seconds for r in results):.0f} s"
    )


def grid(results: Sequence[CellResult]) -> str:
    """The matrix: a row per component, a column per phase; `ok`, `FAIL`, `late` (passed, the
    kill after the phase), `.` (a cell not run), `-` (no cell: off the phase's path)."""
    seen = {r.id: r for r in results}
    width = max(len(c.name) for c in COMPONENTS)
    cols = [p.name for p in PHASES]
    lines = [(" " * width + "  " + "  ".join(f"{p[:9]:<9}" for p in cols)).rstrip()]
    for c in COMPONENTS:
        marks = []
        for p in cols:
            r = seen.get(f"{c.name}/{p}")
            if p in OFF_PATH.get(c.name, {}):
                mark = "-"
            elif r is None or r.outcome == "skipped":
                mark = "."
            elif not r.ok:
                mark = "FAIL"
            else:
                mark = "late" if r.landed == "late" else "ok"
            marks.append(f"{mark:<9}")
        lines.append(f"{c.name:<{width}}  " + "  ".join(marks).rstrip())
    return "\n".join(lines)


def write(path: Path, results: Sequence[CellResult], extra: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**extra, "results": [asdict(r) for r in results], "summary": summary(results)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)


def _first(text: str) -> str:
    return next(iter(text.strip().splitlines()), "")


def _violation(v: dict[str, Any]) -> str:
    return f"{v.get('kind')}: {v.get('detail')}"
