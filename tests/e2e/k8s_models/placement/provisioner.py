"""external-provisioner in its distributed mode (--node-deployment, --strict-topology,
--enable-capacity), one instance per node beside that node's driver.

Follows kubernetes-csi/external-provisioner:
- pkg/controller/controller.go, ShouldProvision -> checkNode: with a NodeDeployment, a claim is
  this instance's only when its volume.kubernetes.io/selected-node names this node; Immediate
  claims are not served (--node-deployment-immediate-binding=false, as the chart runs it).
- pkg/controller/topology.go, GenerateAccessibilityRequirements: with a selected node and
  strictTopology, requisite = [the selected node's topology] and preferred = requisite.
- controller.go, Provision: CreateVolume named "pvc-<uid>" with the class's capabilities, the
  claim's size as required_bytes and, for a restore, the snapshot handle as content source. On an
  error, checkError: ResourceExhausted with a selected node (and topology support) means
  ProvisioningReschedule, which drops the selected-node annotation
  (sig-storage-lib-external-provisioner controller.go, rescheduleProvisioning) so the scheduler
  picks again; any other error is retried in place.
- topology.go, GenerateVolumeNodeAffinity: the PV's nodeAffinity has one term per segment of the
  volume's accessible_topology.
- pkg/capacity/capacity.go (--enable-capacity): for each storage class and each topology segment
  this instance serves (its own node's, with --node-deployment), GetCapacity with that segment as
  accessible_topology, published as a CSIStorageCapacity with capacity and maximumVolumeSize.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from csi_hostpath._pb import csi_pb2 as pb
from tests.e2e.k8s_models.objects import (
    SELECTED_NODE,
    Api,
    Claim,
    PersistentVolume,
    StorageCapacity,
)

TOPOLOGY_KEY = "topology.loop.hostpath.csi.dev/node"
CLASS = "csi-hostpath-local"


def _capability() -> pb.VolumeCapability:
    return pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
        ),
    )


@dataclass
class NodeProvisioner:
    api: Api
    node: str
    client: Any  # the node's own driver (controller service), on its socket

    # ----- pkg/capacity/capacity.go -----
    def publish_capacity(self) -> None:
        segment = {TOPOLOGY_KEY: self.api.nodes[self.node].labels[TOPOLOGY_KEY]}
        reply = self.client.controller.GetCapacity(
            pb.GetCapacityRequest(
                volume_capabilities=[_capability()],
                accessible_topology=pb.Topology(segments=segment),
            )
        )
        maximum = reply.maximum_volume_size.value if reply.HasField("maximum_volume_size") else None
        self.api.capacities[(CLASS, self.node)] = StorageCapacity(
            CLASS, segment, reply.available_capacity, maximum
        )

    # ----- controller.go ShouldProvision / checkNode -----
    def should_provision(self, claim: Claim) -> bool:
        return not claim.volume_name and claim.annotations.get(SELECTED_NODE) == self.node

    # ----- controller.go Provision -----
    def provision(self, claim: Claim) -> PersistentVolume | None:
        if not self.should_provision(claim):
            return None
        segment = pb.Topology(
            segments={TOPOLOGY_KEY: self.api.nodes[self.node].labels[TOPOLOGY_KEY]}
        )
        request = pb.CreateVolumeRequest(
            name=f"pvc-{uuid.uuid5(uuid.NAMESPACE_URL, claim.name)}",
            volume_capabilities=[_capability()],
            capacity_range=pb.CapacityRange(required_bytes=claim.size),
            accessibility_requirements=pb.TopologyRequirement(
                requisite=[segment], preferred=[segment]
            ),
        )
        if claim.snapshot_handle:
            request.volume_content_source.CopyFrom(
                pb.VolumeContentSource(
                    snapshot=pb.VolumeContentSource.SnapshotSource(
                        snapshot_id=claim.snapshot_handle
                    )
                )
            )
        try:
            volume = self.client.controller.CreateVolume(request).volume
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                # checkError -> ProvisioningReschedule: give the claim back to the scheduler.
                del claim.annotations[SELECTED_NODE]
                self.api.record(
                    "PersistentVolumeClaim",
                    claim.name,
                    "ProvisioningFailed",
                    f"failed to provision volume on node {self.node}, rescheduling: {e.details()}",
                )
                return None
            raise
        pv = PersistentVolume(
            name=request.name,
            handle=volume.volume_id,
            claim=claim.name,
            node_affinity=[dict(t.segments) for t in volume.accessible_topology],
        )
        self.api.volumes[pv.name] = pv
        claim.volume_name = pv.name
        self.api.record(
            "PersistentVolumeClaim",
            claim.name,
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {pv.name} on {self.node}",
        )
        # The capacity controller polls and also reacts to PV events; refresh now.
        self.publish_capacity()
        return pv
