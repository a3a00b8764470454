"""Readiness: what Probe answers. Real checks, cheap enough to run on every Probe, and none of
them waits on the store's writer (store/probe.py)."""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.daemon.config import Config
from csi_hostpath.store import probe
from csi_hostpath.system.base import System


def problems(config: Config, db_path: Path, system: System | None) -> list[str]:
    """Why the driver is not ready (empty when it is). system is the node's system layer, None
    in a controller-only process: its machine checks (loop devices, tools) are the node's."""
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
    if config.serves_node and system is not None:
        found += system.readiness()
    return found
