"""The API objects the modelled components share through the apiserver, reduced to the fields
that volumes depend on: one set for both models, the attach path (tests/e2e/k8s_models) and the
placement of node-local volumes (tests/e2e/k8s_models/placement)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.harness import DRIVER_NAME, PV

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
SELECTED_NODE = "volume.kubernetes.io/selected-node"  # external-provisioner controller.go
MULTI_NODE = {
    pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY,
    pb.VolumeCapability.AccessMode.MULTI_NODE_SINGLE_WRITER,
    pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER,
}


def attachment_name(volume_handle: str, node_name: str) -> str:
    """pkg/volume/csi/csi_attacher.go, getAttachmentName: the VolumeAttachment's name is a hash
    of the volume handle, the driver and the node name."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{DRIVER_NAME}{node_name}".encode()).hexdigest()


def multi_attach_allowed(pv: PV) -> bool:
    """pkg/volume/util/util.go, IsMultiAttachAllowed: only ReadWriteMany and ReadOnlyMany
    volumes may be attached to several nodes; ReadWriteOnce and ReadWriteOncePod may not."""
    return pv.cap.access_mode.mode in MULTI_NODE


@dataclass
class Node:
    name: str
    node_id: str = ""  # the CSI node ID (CSINode), what ControllerPublishVolume is given
    labels: dict[str, str] = field(default_factory=dict)  # the topology labels among them
    ready: bool = True
    last_status: float = 0.0  # when the kubelet last posted the node's status
    taints: set[str] = field(default_factory=set)
    volumes_in_use: set[str] = field(default_factory=set)  # status.volumesInUse (kubelet)
    volumes_attached: set[str] = field(default_factory=set)  # status.volumesAttached (ADC)


@dataclass
class Pod:
    name: str
    uid: str
    node: str
    pv: str
    deletion_requested: bool = False  # metadata.deletionTimestamp is set


@dataclass
class VolumeAttachment:
    name: str
    pv: str
    node: str
    attached: bool = False
    attachment_metadata: dict[str, str] = field(default_factory=dict)  # the publish_context
    attach_error: str = ""
    detach_error: str = ""
    deletion_requested: bool = False
    finalizer: bool = False  # external-attacher's, added before it attaches


@dataclass
class Claim:
    """A PersistentVolumeClaim (and, for placement, the pod that uses it)."""

    name: str
    size: int
    storage_class: str = ""
    cap: pb.VolumeCapability = field(default_factory=pb.VolumeCapability)
    snapshot_handle: str = ""  # dataSource: a VolumeSnapshot, resolved to its content's handle
    annotations: dict[str, str] = field(default_factory=dict)
    # The pod's node affinity (key -> value), as a user writes it for a restore (docs).
    pod_affinity: dict[str, str] = field(default_factory=dict)
    volume_name: str = ""  # spec.volumeName once bound

    @property
    def selected_node(self) -> str:
        """WaitForFirstConsumer: the scheduler's choice, an annotation on the claim."""
        return self.annotations.get(SELECTED_NODE, "")

    @selected_node.setter
    def selected_node(self, node: str) -> None:
        if node:
            self.annotations[SELECTED_NODE] = node
        else:
            self.annotations.pop(SELECTED_NODE, None)


@dataclass
class PersistentVolume:
    """A PV as the placement model sees it: its claim and its node affinity."""

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
    reason: str  # FailedAttachVolume, ProvisioningFailed, ...
    message: str
    kind: str = ""  # of the object it is recorded against: Pod, PersistentVolumeClaim
    name: str = ""
    at: float = 0.0


@dataclass
class Api:
    """The objects, and the events recorded against them."""

    nodes: dict[str, Node] = field(default_factory=dict)
    pvs: dict[str, PV] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    vas: dict[str, VolumeAttachment] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    volumes: dict[str, PersistentVolume] = field(default_factory=dict)
    capacities: dict[tuple[str, str], StorageCapacity] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    storage_capacity_tracking: bool = True  # CSIDriver spec.storageCapacity

    def event(self, at: float, reason: str, message: str) -> None:
        self.events.append(Event(reason, message, at=at))

    def record(self, kind: str, name: str, reason: str, message: str) -> None:
        self.events.append(Event(reason, message, kind=kind, name=name))

    def events_of(self, reason: str) -> list[str]:
        return [e.message for e in self.events if e.reason == reason]

    def events_for(self, name: str) -> list[Event]:
        return [e for e in self.events if e.name == name]

    # ----- what a user does with kubectl -----
    def create_pod(self, name: str, uid: str, node: str, pv: str) -> Pod:
        pod = Pod(name, uid, node, pv)
        self.pods[uid] = pod
        return pod

    def delete_pod(self, uid: str) -> None:
        """kubectl delete pod: graceful; the kubelet finishes it."""
        self.pods[uid].deletion_requested = True

    def force_delete_pod(self, uid: str) -> None:
        """kubectl delete pod --force --grace-period=0: the object is gone at once, whatever the
        node did."""
        self.pods.pop(uid, None)

    def taint(self, node: str, key: str) -> None:
        self.nodes[node].taints.add(key)

    def va_for(self, pv: PV, node: str) -> VolumeAttachment | None:
        return self.vas.get(attachment_name(pv.handle, node))
