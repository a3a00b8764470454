"""The README's "Local volumes" session, run as written against a real `make run`.

The README's "Local volumes" session, run as written against a real `make run`: every command
in one shell, each output compared with the README's after masking what changes from run to run
(tests/support/readme_session.py). When the output changes, the README changes with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.kernel import mounts_under, released_after_teardown
from tests.support.make_run import make_run_session
from tests.support.needs import needs_fs
from tests.support.readme_session import README, mask, script, session, split

# What the session's first two steps do in a person's terminals; the test does both itself.
SETUP = ("make run", ". .venv/bin/activate")


def test_the_steps_are_read_from_the_readme() -> None:
    steps = session(README.read_text())
    assert tuple(s.command.split("#")[0].strip() for s in steps[:2]) == SETUP
    assert all(not s.output for s in steps[:2])
    assert len(steps) > 10 and any(s.output for s in steps)


@needs_fs("xfs")
def test_the_readme_session_prints_what_the_readme_shows(workdir: Path) -> None:
    steps = session(README.read_text())[len(SETUP) :]
    here = workdir / "csi_hostpath"  # the repository directory of the README's session
    here.mkdir()
    with make_run_session(here / ".run", here, workdir / "make-run.log", run_dir_env=False) as (
        cli,
        run,
    ):
        run.start()
        env = dict(cli.env)
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"  # what activate does
        env["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
        ran = subprocess.run(
            ["bash", "--noprofile", "--norc"],
            input=script(steps, here),
            capture_output=True,
            text=True,
            env=env,
            cwd=here,
            timeout=900,
            check=False,
        )
        run.stop()
    outputs = split(ran.stdout, len(steps))
    real = "\n".join(f"$ {s.command}\n" + "\n".join(o) for s, o in zip(steps, outputs, strict=True))
    for step, output in zip(steps, outputs, strict=True):
        assert mask(output, str(here)) == mask(step.output), (
            f"README.md's session has drifted at `{step.command}`.\nThis run printed (the "
            f"README writes {here} as /home/me/csi_hostpath):\n{real}\n{ran.stderr}"
        )
    # The session cleans up after itself: nothing mounted or attached, only .run left.
    assert mounts_under(workdir) == [] and released_after_teardown(workdir) == []
    assert os.listdir(here) == [".run"]
