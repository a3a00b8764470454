"""The endpoint claim's rules: only a stale socket at the endpoint path is removed.

The endpoint path is removed only when it is a stale socket. A regular file,
a directory, or a socket another driver still serves on is refused with a clear error."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from csi_hostpath.daemon.endpoint import EndpointRefused, claim_endpoint


def serve_beside(workdir: Path, endpoint: Path, state: str) -> subprocess.CompletedProcess[str]:
    """A second `serve` with its own state directory, on the given endpoint."""
    args = ["serve", "--endpoint", f"unix://{endpoint}", "--state-dir", str(workdir / state)]
    return subprocess.run(
        [sys.executable, "-m", "csi_hostpath", *args, "--node-id", "node-b"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_regular_file_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "csi.sock"
    path.write_text("precious")
    with pytest.raises(EndpointRefused, match="regular file"):
        claim_endpoint(path)
    assert path.read_text() == "precious"


def test_directory_and_symlink_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(EndpointRefused, match="directory"):
        claim_endpoint(tmp_path / "d")
    (tmp_path / "l").symlink_to(tmp_path / "d")
    with pytest.raises(EndpointRefused, match="symlink"):
        claim_endpoint(tmp_path / "l")
    assert (tmp_path / "d").is_dir()


def test_stale_socket_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "csi.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # a crash leaves the inode behind with nobody listening
    assert path.is_socket()
    claim_endpoint(path)
    assert not path.exists()


def test_live_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "csi.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(1)
        with pytest.raises(EndpointRefused, match="another process is serving"):
            claim_endpoint(path)
    assert path.is_socket()


def test_missing_path_gets_its_parent(tmp_path: Path) -> None:
    claim_endpoint(tmp_path / "a" / "b" / "csi.sock")
    assert (tmp_path / "a" / "b").is_dir()
