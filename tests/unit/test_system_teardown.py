"""The system tests' own teardown survives another process detaching a loop device.

The system tests' own teardown survives another process detaching a loop device while it
scans /sys/block (the kernel is shared: that answers ENXIO or ENODEV for a moment)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tests.system import conftest


def test_a_loop_device_detached_during_the_scan_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    backing = tmp_path / "sys" / "block" / "loop7" / "loop" / "backing_file"
    backing.parent.mkdir(parents=True)
    backing.write_text("/elsewhere/file\n")

    def glob(_self: Path, _pattern: str) -> list[Path]:
        return [backing]

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        raise OSError(errno.ENXIO, "No such device or address", str(self))

    monkeypatch.setattr(Path, "glob", glob)
    monkeypatch.setattr(Path, "read_text", read_text)
    assert conftest._loops_to_release(str(tmp_path), "csihp-test:nobody:") == set()
