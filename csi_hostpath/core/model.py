"""The domain model: frozen value objects, no I/O."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


class AccessMode(enum.IntEnum):
    """Numbers equal the CSI wire values, so conversion is a lookup, not a table to maintain."""

    UNKNOWN = 0
    SINGLE_NODE_WRITER = 1
    SINGLE_NODE_READER_ONLY = 2
    MULTI_NODE_READER_ONLY = 3
    MULTI_NODE_SINGLE_WRITER = 4
    MULTI_NODE_MULTI_WRITER = 5
    SINGLE_NODE_SINGLE_WRITER = 6
    SINGLE_NODE_MULTI_WRITER = 7


class AccessType(enum.Enum):
    MOUNT = "mount"
    BLOCK = "block"


class PoolScope(enum.Enum):
    """Where the pool lives: on one node (local), or seen by every node (shared)."""

    LOCAL = "local"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class Capability:
    access_type: AccessType
    access_mode: AccessMode
    fs_type: str = ""  # "" for block, or when the CO leaves it to the driver
    mount_flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopologyRequirement:
    """CreateVolume's accessibility requirements: the segments a volume must (requisite) and
    should first (preferred) be reachable from."""

    requisite: Sequence[Mapping[str, str]] = ()
    preferred: Sequence[Mapping[str, str]] = ()


@dataclass(frozen=True, slots=True)
class ContentSource:
    kind: str  # "snapshot" or "volume"
    source_id: str


@dataclass(frozen=True, slots=True)
class Volume:
    volume_id: str
    name: str
    capacity_bytes: int
    capabilities: tuple[Capability, ...]
    fs_type: str  # the filesystem this volume gets on first stage ("" if only block)
    parameters: Mapping[str, str] = field(default_factory=dict)
    content_source: ContentSource | None = None
    node_id: str | None = None  # set in local pool scope: the node whose pool holds the file
    created_at: float = 0.0
    # The capacity the CO asked for (0: none), which the driver may have rounded up: its
    # snapshots report it, so a claim of the source's size restores them.
    requested_bytes: int = 0

    @property
    def restore_floor(self) -> int:
        """The least a copy of this volume may ask for: the request that made it this size."""
        return min(self.requested_bytes, self.capacity_bytes) or self.capacity_bytes


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: str
    name: str
    source_volume_id: str
    size_bytes: int  # what the snapshot holds: its source's whole size
    created_at: float
    ready: bool = True
    # The least a restore may ask for (its source's restore_floor); 0: size_bytes. CSI's
    # size_bytes reports this one.
    restore_bytes: int = 0

    @property
    def restore_floor(self) -> int:
        return min(self.restore_bytes, self.size_bytes) or self.size_bytes


@dataclass(frozen=True, slots=True)
class Publication:
    """One row of the publish ledger: a node holds a volume."""

    volume_id: str
    node_id: str
    access_mode: AccessMode
    access_type: AccessType
    readonly: bool
    generation: int
    published_at: float


@dataclass(frozen=True, slots=True)
class NodeStaging:
    """A node's record of a volume it has staged."""

    volume_id: str
    staging_path: str
    access_type: AccessType
    access_mode: AccessMode
    fs_type: str
    device: str
    generation: int  # the fencing token the stage was done under; 0 when no ledger was involved
    staged_at: float
    readonly: bool = False  # the loop device itself is read-only (a reader's stage)


@dataclass(frozen=True, slots=True)
class NodePublication:
    volume_id: str
    target_path: str
    readonly: bool
    access_mode: AccessMode
    access_type: AccessType
    mount_flags: tuple[str, ...] = ()
