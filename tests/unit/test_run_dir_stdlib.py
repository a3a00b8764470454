"""`run-dir` runs on the standard library alone, as `make clean-volumes` needs.

`make clean-volumes` runs `python3 -m csi_hostpath run-dir remove` after `make clean` has taken
the venv: `run-dir` must run on the standard library alone, as a python3 without the venv's
packages (`-S`: no site-packages) runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WITHOUT_PACKAGES = (
    "import sys\n"
    "sys.path.insert(0, sys.argv.pop(1))\n"
    "from csi_hostpath.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("command", ["remove", "mounted", "running"])
def test_run_dir_needs_the_standard_library_only(tmp_path: Path, command: str) -> None:
    run_dir = tmp_path / ".run"
    (run_dir / "state" / "pool" / "volumes").mkdir(parents=True)
    argv = ["run-dir", command, "--run-dir", str(run_dir)]
    done = subprocess.run(
        [sys.executable, "-S", "-c", WITHOUT_PACKAGES, str(REPO), *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
