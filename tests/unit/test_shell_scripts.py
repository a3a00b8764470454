"""Every shell script in the repository is one `make lint` runs shellcheck on.

The scripts are found here on their own: each file git tracks whose name ends in .sh, or whose
first line is a shebang that runs sh or bash (.ci/run, a kind node's entrypoint). `make
shell-scripts` prints the list `make lint` hands shellcheck; the two must be the same, so a new
script can't be left out by a glob that does not reach its folder. (Running shellcheck is lint's:
`make test` runs lint first.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHEBANG = re.compile(rb"#!.*[/ ](ba)?sh( |$)")


def shell_scripts(root: Path) -> list[str]:
    """The repository's shell scripts, by their name or their first line."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    found = []
    for name in filter(None, (t.decode() for t in tracked)):
        path = root / name
        if not path.is_file():
            continue
        with path.open("rb") as f:
            first = f.readline().rstrip(b"\n")
        if name.endswith(".sh") or SHEBANG.fullmatch(first):
            found.append(name)
    return sorted(found)


def linted(root: Path) -> list[str]:
    """What `make lint` runs shellcheck on."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "shell-scripts"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.split())


def test_make_lint_covers_every_shell_script() -> None:
    scripts = shell_scripts(ROOT)
    assert ".ci/run" in scripts and "tools/genproto.sh" in scripts
    assert linted(ROOT) == scripts
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert lint is not None and "shellcheck -x $(SHELL_SCRIPTS)" in lint[1]


def test_a_script_known_by_its_first_line_is_found(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    files = {
        "a.sh": "echo a\n",
        "bin/entry": "#!/bin/bash\necho b\n",
        "bin/env": "#!/usr/bin/env sh\necho c\n",
        "bin/py": "#!/usr/bin/env python3\n",
        "notes.txt": "#!/bin/bash is how a script starts\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True, timeout=60)
    assert shell_scripts(tmp_path) == ["a.sh", "bin/entry", "bin/env"]
