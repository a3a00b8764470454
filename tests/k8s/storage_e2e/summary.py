"""The summary of one run of Kubernetes' external storage e2e suite, from Ginkgo's JSON report.

Ginkgo (v2) reports every spec of e2e.test, the thousands outside the run's focus among them, each
with a State; a spec the suite itself skipped carries its reason as the failure message (the
e2eskipper.Skipf text), one the run's --skip left out carries none. This counts only the specs of
the External Storage suites: passed, failed (failed, panicked, timed out, interrupted, aborted),
skipped by the suite (grouped by reason) and left out by the run's --skip, grouped by the reason
each part of it was given (--left-out REASON RE, once per part). `make k8s-e2e` runs it:

    python -m tests.k8s.storage_e2e.summary report.json --left-out 'why' 'RE' ... --out summary.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUITE_PREFIX = "External Storage"
FAILED_STATES = frozenset({"failed", "panicked", "timedout", "interrupted", "aborted"})


@dataclass(frozen=True)
class Spec:
    name: str
    state: str
    message: str
    seconds: float


@dataclass
class Summary:
    passed: list[Spec] = field(default_factory=list)
    failed: list[Spec] = field(default_factory=list)
    # reason -> specs the suite skipped for it
    skipped: dict[str, list[Spec]] = field(default_factory=dict)
    # reason -> specs the run's --skip left out for it
    excluded: dict[str, list[Spec]] = field(default_factory=dict)
    pending: list[Spec] = field(default_factory=list)

    @property
    def skipped_count(self) -> int:
        return sum(len(v) for v in self.skipped.values())

    def counts(self) -> dict[str, int]:
        return {
            "passed": len(self.passed),
            "failed": len(self.failed),
            "skipped": self.skipped_count,
            "excluded": sum(len(v) for v in self.excluded.values()),
            "pending": len(self.pending),
        }


def spec_name(report: Mapping[str, Any]) -> str:
    parts = [*(report.get("ContainerHierarchyTexts") or []), report.get("LeafNodeText", "")]
    return " ".join(p for p in parts if p)


def specs(reports: Iterable[Mapping[str, Any]]) -> list[Spec]:
    """The It nodes of the External Storage suites, from the suite reports of one run."""
    found = []
    for suite in reports:
        for rep in suite.get("SpecReports") or []:
            if rep.get("LeafNodeType") != "It":
                continue
            name = spec_name(rep)
            if SUITE_PREFIX not in name:
                continue
            failure = rep.get("Failure") or {}
            found.append(
                Spec(
                    name=name,
                    state=str(rep.get("State", "")),
                    message=str(failure.get("Message", "")).strip(),
                    seconds=float(rep.get("RunTime", 0)) / 1e9,
                )
            )
    return found


def _reason(message: str) -> str:
    # The suite's skip messages name the reason on their first line, after Ginkgo's own prefix.
    first = message.splitlines()[0] if message else ""
    return re.sub(r"^skipped\s*-?\s*", "", first, flags=re.IGNORECASE).strip()


def summarize(found: Sequence[Spec], left_out: Sequence[tuple[str, str]] = ()) -> Summary:
    """left_out: (reason, regex) for each part of the run's --skip."""
    out = Summary()
    parts = [(reason, re.compile(rx)) for reason, rx in left_out]
    grouped: dict[str, list[Spec]] = defaultdict(list)
    excluded: dict[str, list[Spec]] = defaultdict(list)
    for spec in found:
        if spec.state == "passed":
            out.passed.append(spec)
        elif spec.state in FAILED_STATES:
            out.failed.append(spec)
        elif spec.state == "pending":
            out.pending.append(spec)
        elif spec.state == "skipped":
            if spec.message:
                grouped[_reason(spec.message)].append(spec)
                continue
            why = next((reason for reason, rx in parts if rx.search(spec.name)), None)
            if why is not None:
                excluded[why].append(spec)
            # else outside the run's focus (another driver's specs, for one): not in the run
        else:
            out.failed.append(spec)  # a state this tool does not know is not a pass
    out.skipped = dict(sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    out.excluded = dict(excluded)
    return out


def markdown(summary: Summary) -> str:
    c = summary.counts()
    lines = [
        "# External storage e2e: summary",
        "",
        f"passed {c['passed']}, failed {c['failed']}, skipped by the suite {c['skipped']}, "
        f"left out by --skip {c['excluded']}"
        + (f", pending {c['pending']}" if c["pending"] else ""),
        "",
    ]
    if summary.failed:
        lines += ["## Failed", ""]
        for spec in sorted(summary.failed, key=lambda s: s.name):
            first = spec.message.splitlines()[0] if spec.message else spec.state
            lines.append(f"- {spec.name} ({spec.state}, {spec.seconds:.0f} s): {first}")
        lines.append("")
    if summary.skipped:
        lines += ["## Skipped by the suite, by reason", ""]
        for reason, group in summary.skipped.items():
            lines.append(f"### {reason} ({len(group)})")
            lines.append("")
            lines += [f"- {spec.name}" for spec in sorted(group, key=lambda s: s.name)]
            lines.append("")
    if summary.excluded:
        lines += ["## Left out by the run's --skip, by reason", ""]
        for reason, group in summary.excluded.items():
            lines += [f"### {reason} ({len(group)})", ""]
            lines += [f"- {spec.name}" for spec in sorted(group, key=lambda s: s.name)]
            lines.append("")
    slowest = sorted(summary.passed, key=lambda s: -s.seconds)[:10]
    if slowest:
        lines += ["## Slowest passed specs", ""]
        lines += [f"- {spec.seconds:.0f} s: {spec.name}" for spec in slowest]
        lines.append("")
    return "\n".join(lines)


def as_json(summary: Summary) -> dict[str, Any]:
    return {
        "counts": summary.counts(),
        "failed": [
            {"name": s.name, "state": s.state, "message": s.message} for s in summary.failed
        ],
        "skipped": {reason: [s.name for s in group] for reason, group in summary.skipped.items()},
        "excluded": {reason: [s.name for s in group] for reason, group in summary.excluded.items()},
        "passed": [{"name": s.name, "seconds": round(s.seconds, 1)} for s in summary.passed],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.k8s.storage_e2e.summary", description=__doc__
    )
    parser.add_argument("report", type=Path, help="ginkgo's --json-report file")
    parser.add_argument(
        "--left-out",
        nargs=2,
        action="append",
        default=[],
        metavar=("REASON", "RE"),
        help="one part of the run's --skip and why it is there",
    )
    parser.add_argument("--out", type=Path, help="write the Markdown summary here")
    parser.add_argument("--json", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    if not args.report.exists():
        print(
            f"summary: no report at {args.report} (ginkgo did not get to write it)", file=sys.stderr
        )
        return 1
    left_out = [(reason, rx) for reason, rx in args.left_out]
    summary = summarize(specs(json.loads(args.report.read_text())), left_out)
    text = markdown(summary)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.json:
        args.json.write_text(json.dumps(as_json(summary), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
