"""Readiness: what Probe answers. Real checks, cheap enough to run on every Probe, and none of
them waits on the store's writer (store/probe.py)."""

from __future__ import annotations

import os
from pathlib import Path

from csi_hostpath.store import probe
from csi_hostpath.system.base import System


class Readiness:
    """Why the driver is not ready (empty when it is): what Probe and the gRPC health service
    answer. node_system is the node's system layer, None in a controller-only process: its
    machine checks (loop devices, tools) are the node's."""

    def __init__(
        self, db_path: Path, state_dir: Path, pool_dir: Path, node_system: System | None
    ) -> None:
        self.db_path = db_path
        self.state_dir = state_dir
        self.pool_dir = pool_dir
        self.system = node_system

    def problems(self) -> list[str]:
        found = []
        try:
            probe.read_check(self.db_path)
        except Exception as e:  # noqa: BLE001 - any failure means "not ready"
            found.append(f"state store {self.db_path} unreadable: {e}")
        try:
            probe.write_check(self.state_dir)
        except OSError as e:
            found.append(f"state directory {self.state_dir} refuses a write: {e.strerror or e}")
        if not os.access(self.pool_dir, os.W_OK):
            found.append(f"pool directory {self.pool_dir} is not writable")
        if self.system is not None:
            found += self.system.readiness()
        return found
