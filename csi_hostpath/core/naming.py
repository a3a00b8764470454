"""Identifier rules. IDs are generated here and validated strictly on input, so that nothing a
client sends is ever joined into a filesystem path unless it matches these patterns."""

from __future__ import annotations

import hashlib
import re
import uuid

VOLUME_ID_PATTERN = re.compile(r"vol-[0-9a-f]{32}")
# A snapshot cut from a local pool names its node after "@": a restore asked on
# another node can then say where the source is, and the provisioner reschedules there. Only
# node names of Kubernetes' own shape are carried (they fit, and hold no "/"); the ID stays
# within the spec's 128 bytes (5 + 32 + 1 + 80).
NODE_HOME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
SNAPSHOT_ID_PATTERN = re.compile(rf"snap-[0-9a-f]{{32}}(@{NODE_HOME_PATTERN.pattern})?")
# The spec's size limit for strings; names longer than this are refused rather than truncated.
MAX_STRING_BYTES = 128
LOOP_TAG_PREFIX = "csihp:"


def new_volume_id() -> str:
    return f"vol-{uuid.uuid4().hex}"


def new_snapshot_id(home: str | None = None) -> str:
    """A new snapshot ID; with a home node (local scope), the node is part of it."""
    if home and NODE_HOME_PATTERN.fullmatch(home):
        return f"snap-{uuid.uuid4().hex}@{home}"
    return f"snap-{uuid.uuid4().hex}"


def snapshot_home(snapshot_id: str) -> str | None:
    """The node a snapshot ID says it was cut on, if it says."""
    if not is_snapshot_id(snapshot_id) or "@" not in snapshot_id:
        return None
    return snapshot_id.split("@", 1)[1]


def is_volume_id(value: str) -> bool:
    return VOLUME_ID_PATTERN.fullmatch(value) is not None


def is_snapshot_id(value: str) -> bool:
    return SNAPSHOT_ID_PATTERN.fullmatch(value) is not None


def node_key(node_id: str) -> str:
    """A short, path-safe, stable key for a node ID (node IDs are free text up to 128 bytes)."""
    return hashlib.sha256(node_id.encode()).hexdigest()[:16]


def loop_tag_prefix(node_id: str) -> str:
    return f"{LOOP_TAG_PREFIX}{node_key(node_id)}:"


def loop_tag(node_id: str, volume_id: str) -> str:
    """The label a node puts on the loop device it attaches for a volume.

    Loop devices are global to a kernel, and several node plugins can share one kernel (kind nodes
    are containers), so a device is found by this tag, never by its backing file alone. The tag
    fits lo_file_name (63 bytes): 6 + 16 + 1 + 36.
    """
    return f"{loop_tag_prefix(node_id)}{volume_id}"


def volume_id_from_tag(tag: str) -> str | None:
    parts = tag.split(":")
    if len(parts) == 3 and parts[0] + ":" == LOOP_TAG_PREFIX and is_volume_id(parts[2]):
        return parts[2]
    return None
