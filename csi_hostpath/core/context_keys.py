"""The keys of the string maps the driver and the CO pass between RPCs: the controller writes
them, the node reads them. One place, so neither service imports the other."""

from __future__ import annotations

# ControllerPublishVolume's publish_context, handed to NodeStage/NodePublish by the CO.
GENERATION_KEY = "generation"  # the fencing token: the lease generation granted to the node
READONLY_KEY = "readonly"  # "true" when the publication is read-only
# "mount" or "block": the access type the ledger granted. NodeStage refuses another, so a block
# grant is never staged as a filesystem (mkfs over the block data).
ACCESS_TYPE_KEY = "accessType"

# A volume's volume_context (CreateVolume's answer; an inline volume's attributes in the pod).
FS_TYPE_KEY = "fsType"
# Kubelet adds it to NodePublish's volume_context when the CSIDriver object sets podInfoOnMount:
# "true" for a CSI inline ephemeral volume (kubernetes-csi docs, "Pod Info on Mount").
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
# An inline volume's size attribute, a Kubernetes quantity such as "100Mi".
EPHEMERAL_SIZE_KEY = "size"
# Kubelet adds it to NodePublish's volume_context when the CSIDriver sets podInfoOnMount: the
# pod whose cgroup gets the volume's I/O limits.
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"
