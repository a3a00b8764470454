"""The summary of one run of Kubernetes' external storage e2e suite, from Ginkgo's JSON report.

Ginkgo (v2) reports every spec of e2e.test, the thousands outside the run's focus among them, each
with a State; a spec the suite itself skipped carries its reason as the failure message (the
e2eskipper.Skipf text), one the run's --skip left out carries none. This counts only the specs of
the External Storage suites: passed, failed (failed, panicked, timed out, interrupted, aborted),
skipped by the suite (grouped by reason) and left out by --skip (named with the pattern). `make
k8s-e2e` runs it as a program:

    python -m tests.k8s_e2e.summary report.json --skip 'RE' --out summary.md --json summary.json
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
    # specs the run's --skip pattern left out
    excluded: list[Spec] = field(default_factory=list)
    pending: list[Spec] = field(default_factory=list)

    @property
    def skipped_count(self) -> int:
        return sum(len(v) for v in self.skipped.values())

    def counts(self) -> dict[str, int]:
        return {
            "passed": len(self.passed),
            "failed": len(self.failed),
            "skipped": self.skipped_count,
            "excluded": len(self.excluded),
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
            if not name.startswith(SUITE_PREFIX):
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


def summarize(found: Sequence[Spec], skip_pattern: str = "") -> Summary:
    out = Summary()
    skip_re = re.compile(skip_pattern) if skip_pattern else None
    grouped: dict[str, list[Spec]] = defaultdict(list)
    for spec in found:
        if spec.state == "passed":
            out.passed.append(spec)
        elif spec.state in FAILED_STATES:
            out.failed.append(spec)
        elif spec.state == "pending":
            out.pending.append(spec)
        elif spec.state == "skipped":
            if not spec.message and skip_re is not None and skip_re.search(spec.name):
                out.excluded.append(spec)
            elif not spec.message:
                # Outside the run's focus (another driver's specs, for one): not part of the run.
                continue
            else:
                grouped[_reason(spec.message)].append(spec)
        else:
            out.failed.append(spec)  # a state this tool does not know is not a pass
    out.skipped = dict(sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0])))
    return out


def markdown(summary: Summary, skip_pattern: str) -> str:
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
        lines += [f"## Left out by --skip `{skip_pattern}` ({len(summary.excluded)})", ""]
        lines += [f"- {spec.name}" for spec in sorted(summary.excluded, key=lambda s: s.name)]
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
        "excluded": [s.name for s in summary.excluded],
        "passed": [{"name": s.name, "seconds": round(s.seconds, 1)} for s in summary.passed],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_e2e.summary", description=__doc__)
    parser.add_argument("report", type=Path, help="ginkgo's --json-report file")
    parser.add_argument("--skip", default="", help="the run's --skip pattern")
    parser.add_argument("--out", type=Path, help="write the Markdown summary here")
    parser.add_argument("--json", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    if not args.report.exists():
        print(
            f"summary: no report at {args.report} (ginkgo did not get to write it)", file=sys.stderr
        )
        return 1
    summary = summarize(specs(json.loads(args.report.read_text())), args.skip)
    text = markdown(summary, args.skip)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.json:
        args.json.write_text(json.dumps(as_json(summary), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
