"""Tests that need a system tool skip when it is missing, and name the Debian package to install.

The tool -> package table is tools/system-deps.txt, the same one tools/ensure-system-deps.sh
installs from, so a skip reason and the installer never disagree.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest

DEPS_FILE = Path(__file__).resolve().parents[2] / "tools" / "system-deps.txt"

# The tools each filesystem type needs: format, grow online, and (ext4) grow offline.
FS_TOOLS = {
    "ext4": ("mkfs.ext4", "resize2fs", "e2fsck"),
    "xfs": ("mkfs.xfs", "xfs_growfs"),
}


@cache
def packages() -> dict[str, str]:
    """tool -> Debian package, from tools/system-deps.txt."""
    table: dict[str, str] = {}
    for line in DEPS_FILE.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2:
            table[words[0]] = words[1]
    return table


def missing_reason(*tools: str) -> str | None:
    """Why a test that runs these tools can't run here ("needs mkfs.xfs: apt-get install
    xfsprogs"), or None when all of them are on PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return None
    pkgs = sorted({packages().get(tool, "?") for tool in missing})
    return f"needs {', '.join(missing)}: apt-get install {' '.join(pkgs)}"


def needs_tools(*tools: str) -> pytest.MarkDecorator:
    """A skip marker for a test (or a pytest.param) that runs these tools."""
    reason = missing_reason(*tools)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def needs_fs(fs_type: str) -> pytest.MarkDecorator:
    """A skip marker for a test that formats, mounts or grows this filesystem type."""
    return needs_tools(*FS_TOOLS.get(fs_type, ()))


def skip_unless_tools(*tools: str) -> None:
    """Skip the running test now (for a test whose need depends on a fixture's parameter)."""
    reason = missing_reason(*tools)
    if reason is not None:
        pytest.skip(reason)


def fs_available(fs_type: str) -> bool:
    return missing_reason(*FS_TOOLS.get(fs_type, ())) is None
