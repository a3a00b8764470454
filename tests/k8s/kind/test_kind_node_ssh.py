"""The kind nodes' SSH command: a session's command runs in its node, as a node without sudo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tools" / "kind" / "node-ssh.sh"


def session(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    docker = fake / "docker"
    docker.write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SSH_ORIGINAL_COMMAND": command}
    return subprocess.run(
        ["bash", str(SCRIPT), "run", "kind-worker"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def test_a_command_runs_inside_its_node_without_the_sudo_prefix(tmp_path: Path) -> None:
    done = session(tmp_path, "sudo systemctl stop kubelet")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exec|-i|kind-worker|sh|-c|systemctl stop kubelet|"
    done = session(tmp_path, "mount | grep /var/lib/kubelet")
    assert done.stdout == "exec|-i|kind-worker|sh|-c|mount | grep /var/lib/kubelet|"


def test_the_node_answers_as_one_without_sudo_and_runs_no_shell(tmp_path: Path) -> None:
    done = session(tmp_path, "sudo --version")
    assert done.returncode == 127 and "sudo: command not found" in done.stderr
    done = session(tmp_path, "")
    assert done.returncode != 0 and "no shells" in done.stderr
