"""Whether statmount(2) works is learnt once and kept on the system's mounts object.

Whether the kernel can name one mount by statmount(2) is learnt once and kept where a reader
sees it: on the system's LinuxMounts (mounts.statmount.works), not in a module global."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi_hostpath.system.linux import LinuxMounts
from csi_hostpath.system.linux import statmount as linux_statmount


def test_the_statmount_probe_is_an_attribute_of_the_mounts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[str] = []

    def unsupported(path: str) -> None:
        asked.append(path)
        raise linux_statmount.StatmountUnsupported("no statmount (simulated)", kernel_wide=True)

    monkeypatch.setattr(linux_statmount, "find", unsupported)
    mounts = LinuxMounts()
    assert mounts.statmount.works
    mounts.find(str(tmp_path))  # answered from mountinfo
    assert not mounts.statmount.works
    mounts.find(str(tmp_path))
    assert len(asked) == 1, "a kernel that said no is not asked again"
    assert LinuxMounts().statmount.works, "learnt by its owner, not by the process"
