"""The README's console session as data: its commands with the output each one shows, and the
masks that let a real run be compared with it. What changes from run to run is masked: IDs, the
directory, loop devices, pids, times and the bytes a volume uses; everything else must match."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
# Where the README's session runs; a real run's directory is written as this.
README_DIR = "/home/me/csi_hostpath"
MARK = "@@readme-step "


@dataclass(frozen=True)
class Step:
    command: str
    output: tuple[str, ...]


def session(text: str, heading: str = "## Local volumes") -> list[Step]:
    """The steps of the first ```console block after heading."""
    block = text[text.index(heading) :]
    block = block[block.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```\n")]
    steps: list[Step] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:], ()))
        else:
            steps[-1] = Step(steps[-1].command, (*steps[-1].output, line))
    return steps


def script(steps: list[Step], directory: Path) -> str:
    """One bash script that runs the steps in order in one shell (a step may leave state for the
    next: a descriptor, the working directory), each output preceded by a marker line."""
    lines = ["exec 2>&1", f"cd {directory}"]
    for i, step in enumerate(steps):
        lines += [f"echo '{MARK}{i}'", step.command]
    return "\n".join(lines) + "\n"


def split(output: str, count: int) -> list[list[str]]:
    """A run's output, cut at the markers into each step's lines."""
    parts: list[list[str]] = [[] for _ in range(count)]
    current = None
    for line in output.splitlines():
        if line.startswith(MARK):
            current = int(line.removeprefix(MARK))
        elif current is not None:
            parts[current].append(line)
    return parts


_MASKS = [
    (re.compile(r"\bvol-[0-9a-f]{32}\b"), "vol-ID"),
    (re.compile(r"\bsnap-[0-9a-f]{32}(@[^\s)]+)?"), r"snap-ID\1"),
    (re.compile(r"\bsnap-ID@[^\s)]+"), "snap-ID@NODE"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), "TIME"),
    (re.compile(r"\bpid \d+"), "pid PID"),
    (re.compile(r"/dev/loop\d+"), "/dev/loopN"),
]
# Tables whose columns hold what a run uses: masked by position under their header.
_USAGE_COLUMNS: dict[tuple[str, ...], tuple[int, ...]] = {
    ("NAME", "FS", "SIZE", "ALLOCATED", "USED"): (3, 4),
    ("Filesystem", "Size", "Used", "Avail", "Use%"): (2, 3, 4),
}


def mask(lines: list[str] | tuple[str, ...], directory: str = README_DIR) -> list[str]:
    out = []
    columns: tuple[int, ...] = ()
    for raw in lines:
        line = raw.replace(directory, README_DIR)
        for pattern, replacement in _MASKS:
            line = pattern.sub(replacement, line)
        words = line.split()
        header = _USAGE_COLUMNS.get(tuple(words[:5]))
        if header is not None:
            columns = header
        elif columns:
            words = [("USAGE" if i in columns else w) for i, w in enumerate(words)]
        out.append(" ".join(words))  # column widths follow the masked values: not compared
    return out
