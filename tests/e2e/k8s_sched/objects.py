"""The API objects the model passes around: just the fields the modelled code reads."""

from __future__ import annotations

from dataclasses import dataclass, field

SELECTED_NODE = "volume.kubernetes.io/selected-node"  # external-provisioner controller.go


@dataclass
class Node:
    name: str
    labels: dict[str, str]


@dataclass
class Claim:
    """A PersistentVolumeClaim of a WaitForFirstConsumer class, and the pod that uses it."""

    name: str
    size: int
    storage_class: str
    snapshot_handle: str = ""  # dataSource: a VolumeSnapshot, resolved to its content's handle
    annotations: dict[str, str] = field(default_factory=dict)
    # The pod's node affinity (key -> value), as a user writes it for a restore (docs).
    pod_affinity: dict[str, str] = field(default_factory=dict)
    volume_name: str = ""  # spec.volumeName once bound


@dataclass
class PersistentVolume:
    name: str
    handle: str
    claim: str
    node_affinity: list[dict[str, str]]  # one term per accessible topology segment


@dataclass
class StorageCapacity:
    """storage.k8s.io/v1 CSIStorageCapacity."""

    storage_class: str
    node_topology: dict[str, str]  # matchLabels
    capacity: int
    maximum_volume_size: int | None


@dataclass(frozen=True)
class Event:
    kind: str  # Pod or PersistentVolumeClaim
    name: str
    reason: str
    message: str


@dataclass
class ApiServer:
    """The objects, and the events recorded against them."""

    nodes: dict[str, Node] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    volumes: dict[str, PersistentVolume] = field(default_factory=dict)
    capacities: dict[tuple[str, str], StorageCapacity] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    storage_capacity_tracking: bool = True  # CSIDriver spec.storageCapacity

    def record(self, kind: str, name: str, reason: str, message: str) -> None:
        self.events.append(Event(kind, name, reason, message))

    def events_for(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]
