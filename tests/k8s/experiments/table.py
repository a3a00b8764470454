"""The results of a run and the table printed at its end (experiment, result, seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    letter: str
    title: str
    # passed, FAILED, or skipped (not selected, or not reached because an earlier step failed).
    outcome: str
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "passed"


def render(results: Sequence[Result]) -> str:
    """A plain-text table, one row per experiment in letter order, and a summary line; the detail
    of a failure (its first line) goes in the last column."""
    rows = [
        (
            r.letter,
            r.title,
            r.outcome,
            f"{r.seconds:.0f}",
            r.detail.splitlines()[0] if r.detail else "",
        )
        for r in sorted(results, key=lambda r: r.letter)
    ]
    headers = ("exp", "experiment", "result", "seconds", "detail")
    widths = [
        max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
        for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        cells = [
            c.rjust(w) if i == 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    passed = sum(r.ok for r in results)
    failed = sum(r.outcome == "FAILED" for r in results)
    total = sum(r.seconds for r in results)
    lines.append(
        f"{passed} passed, {failed} failed, {len(results) - passed - failed} skipped; {total:.0f} s"
    )
    return "\n".join(lines)


def all_passed(results: Sequence[Result]) -> bool:
    """True only when every experiment ran and passed: a skipped one is no pass."""
    return bool(results) and all(r.ok for r in results)
