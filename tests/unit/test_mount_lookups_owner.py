"""The per-RPC mount cache is held by LinuxMounts, not a module global.

The per-RPC mount cache is an object its owner holds and hands on, not a module global: the
system's LinuxMounts keeps its SharedLookups (mounts.lookups), find_mount is given it, and a
scope one LinuxMounts opened is not another's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from csi_hostpath.system.linux import LinuxMounts, mountinfo
from csi_hostpath.system.linux import statmount as linux_statmount
from csi_hostpath.system.linux.mountinfo import MountRecord

SYSTEM = Path(__file__).resolve().parents[2] / "csi_hostpath" / "system"


def test_a_scope_is_its_owners_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def unsupported(path: str) -> None:
        raise linux_statmount.StatmountUnsupported("no statmount (simulated)", kernel_wide=True)

    parses: list[str] = []  # "all": the scope's one parse; "one": a lookup reading for itself
    read_all, read_at = mountinfo.read_mountinfo, mountinfo.read_mountinfo_at

    def counted_all() -> list[MountRecord]:
        parses.append("all")
        return read_all()

    def counted_at(mount_point: str) -> list[MountRecord]:
        parses.append("one")
        return read_at(mount_point)

    monkeypatch.setattr(linux_statmount, "find", unsupported)
    monkeypatch.setattr(mountinfo, "read_mountinfo", counted_all)
    monkeypatch.setattr(mountinfo, "read_mountinfo_at", counted_at)
    mine, other = LinuxMounts(), LinuxMounts()
    with mine.shared_lookups():
        assert mine.find(str(tmp_path)) is None
        assert mine.find(str(tmp_path / "again")) is None
        assert other.find(str(tmp_path)) is None  # outside any scope of its own
    assert parses == ["all", "one"], parses


def test_no_module_of_the_system_layer_keeps_a_context_variable() -> None:
    found = []
    for path in sorted(SYSTEM.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Call) and "ContextVar" in ast.unparse(value.func):
                found.append(f"{path.relative_to(SYSTEM)}:{node.lineno}")
    assert found == []
