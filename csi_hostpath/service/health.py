"""Readiness: what Probe answers. Real checks, cheap enough to run on every Probe."""

from __future__ import annotations

import os

from csi_hostpath.config import Config
from csi_hostpath.store.db import Store
from csi_hostpath.system.runner import missing_tools

NODE_TOOLS = ("blkid", "mkfs.ext4", "mount", "umount")


def problems(config: Config, store: Store) -> list[str]:
    found = []
    try:
        store.ping()
    except Exception as e:  # noqa: BLE001 - any failure means "not ready"
        found.append(f"state store unusable: {e}")
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
