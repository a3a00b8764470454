"""The endpoint claim against real `serve` processes: a live socket is never taken over.

The endpoint claim against real `serve` processes: a second driver with its own state
directory leaves a live socket to the driver that serves on it, and a regular file at the
endpoint is refused and kept. The claim's rules on their own: tests/unit/test_endpoint_claim.py."""

from __future__ import annotations

from pathlib import Path

from csi_hostpath._pb import csi_pb2
from tests.conftest import in_process
from tests.unit.test_endpoint_claim import serve_beside


def test_second_driver_with_another_state_dir_does_not_take_over(workdir: Path) -> None:
    from csi_hostpath.system.fake import fake_system

    with in_process(workdir, "a", system=fake_system) as client:
        out = serve_beside(workdir, client.socket, "b-state")
        assert out.returncode == 1, out.stderr
        assert "another process is serving" in out.stderr
        # The first driver still owns its socket and answers.
        client.identity.Probe(csi_pb2.ProbeRequest(), timeout=5)


def test_serve_refuses_a_regular_file_endpoint(workdir: Path) -> None:
    path = workdir / "notasocket"
    path.write_text("precious")
    out = serve_beside(workdir, path, "s-state")
    assert out.returncode == 1, out.stderr
    assert "regular file" in out.stderr
    assert path.read_text() == "precious"
