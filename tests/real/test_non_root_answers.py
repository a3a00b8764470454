"""What a user who is not root is told: permission denied, never a wrong cause or a wrong fix.

The driver's socket is 0600 and its pool's owner marker 0600, both root's. A user's `csi-hostpath
volume list` was told "nothing answers on it ... start it again" while the driver ran, and
doctor advised `state rebuild --take-over` for a healthy pool it could not read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import in_process

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NOBODY, sys.executable, "-m", "csi_hostpath", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HOME": "/"},
    )


def test_a_user_the_socket_refuses_is_told_permission_denied(workdir: Path) -> None:
    workdir.chmod(0o755)
    with in_process(workdir, "drv") as client:
        endpoint = f"unix://{client.socket}"
        done = _as_nobody("volume", "list", "--endpoint", endpoint)
    assert done.returncode == 1, done
    assert f"permission denied: {client.socket}" in done.stderr, done
    assert "run it as root" in done.stderr
    assert "nothing answers" not in done.stderr and "start it again" not in done.stderr


def test_doctor_never_advises_a_take_over_of_a_healthy_pool(workdir: Path) -> None:
    workdir.chmod(0o755)
    pool = workdir / "pool"
    pool.mkdir(mode=0o755)  # a hostPath the kubelet made: others may enter, not read the marker
    with in_process(workdir, "drv", "--pool-dir", str(pool), "--pool-scope", "shared"):
        state = workdir / "drv-state"
        done = _as_nobody("doctor", "--state-dir", str(state), "--pool-dir", str(pool))
        as_root = subprocess.run(
            [sys.executable, "-m", "csi_hostpath", "doctor", "--state-dir", str(state),
             "--pool-dir", str(pool)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert "Traceback" not in done.stderr, done
    assert "--take-over" not in done.stdout, done.stdout
    owner = next(line for line in done.stdout.splitlines() if "pool-owner" in line)
    assert "permission denied" in owner, done.stdout
    assert "--take-over" not in as_root.stdout, as_root.stdout
    owner = next(line for line in as_root.stdout.splitlines() if "pool-owner" in line)
    assert owner.startswith("OK"), as_root.stdout
