"""Readiness: what Probe answers. Real checks, cheap enough to run on every Probe, and none of
them waits on the store's writer (store/probe.py)."""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.config import Config
from csi_hostpath.store import probe
from csi_hostpath.system.runner import missing_tools

NODE_TOOLS = ("blkid", "mkfs.ext4", "mount", "umount")


def problems(config: Config, db_path: Path) -> list[str]:
    found = []
    try:
        probe.read_check(db_path)
    except Exception as e:  # noqa: BLE001 - any failure means "not ready"
        found.append(f"state store {db_path} unreadable: {e}")
    try:
        probe.write_check(config.state_dir)
    except OSError as e:
        found.append(f"state directory {config.state_dir} refuses a write: {e.strerror or e}")
    if not os.access(config.pool_dir, os.W_OK):
        found.append(f"pool directory {config.pool_dir} is not writable")
    if config.serves_node:
        if not os.access("/dev/loop-control", os.R_OK | os.W_OK):
            found.append(
                "/dev/loop-control is missing or not usable (is /dev mounted, privileged?)"
            )
        missing = missing_tools(NODE_TOOLS)
        if missing:
            found.append(f"tools missing from PATH: {', '.join(missing)}")
    return found
