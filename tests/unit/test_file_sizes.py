"""Every file of code the project writes, tests and tools included, stays under 400 lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 400
CODE_SUFFIXES = (".py", ".sh", ".go", ".tpl")
# Generated or kept as their upstream wrote them: nobody here reads them to follow a call.
NOT_WRITTEN_HERE = ("csi_hostpath/_pb/",)


def tracked_code(root: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(
        path
        for path in listed.split("\0")
        if path.endswith(CODE_SUFFIXES) and not path.startswith(NOT_WRITTEN_HERE)
    )


def too_long(root: Path, paths: list[str]) -> dict[str, int]:
    lengths = {path: len((root / path).read_text().splitlines()) for path in paths}
    return {path: n for path, n in lengths.items() if n >= LIMIT}


def test_every_file_of_code_is_under_the_limit() -> None:
    paths = tracked_code(ROOT)
    assert len(paths) > 100, "git ls-files found too few files to be this checkout"
    assert too_long(ROOT, paths) == {}


def test_a_long_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "short.py").write_text("x = 1\n" * (LIMIT - 1))
    assert too_long(tmp_path, ["long.py", "short.py"]) == {"long.py": LIMIT}
