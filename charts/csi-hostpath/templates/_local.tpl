{{/*
The sidecars of the many-machines shape (pool.scope local), added to each node's DaemonSet pod,
beside the driver running with its controller service for this node's pool alone.

external-provisioner's distributed provisioning (README of v6.4.1, "Deployment on each node"):
--node-deployment with NODE_NAME set makes each instance create only the volumes whose selected
node is its own, and delete only its own; --strict-topology and --immediate-topology=false keep
CreateVolume's topology to that one node. The chart creates only the WaitForFirstConsumer class
in this shape, so the scheduler picks the node by its capacity. Claims of an Immediate class a
user writes are served too (--node-deployment-immediate-binding=true): the provisioners whose
node matches the class's allowedTopologies (all of them when it has none) race to set the claim's
selected-node annotation after a random delay, and the winner creates the volume on its node.
An Immediate class with allowedTopologies naming one node is how a volume is pinned to a node
before any pod exists.

--enable-capacity publishes each node's GetCapacity as CSIStorageCapacity objects in the release
namespace (NAMESPACE), owned by the DaemonSet: --capacity-ownerref-level=1 walks one level up from
POD_NAME, and at level 1 pkg/owner/owner.go (lookupRecursive) takes the pod's controller reference
without reading the DaemonSet, so the owner lookup needs `get` on pods only.

csi-snapshotter v8.7.0 has the same node mode (cmd/csi-snapshotter/main.go: --node-deployment,
NODE_NAME, no leader election); it handles the contents the snapshot-controller labels with its
node, which the snapshot-controller does only with --enable-distributed-snapshotting. Its group
snapshot gate, on by default since v8.7.0, is turned off here, as it was before: group snapshots
through node-deployed snapshotters have not been tried in this shape.
*/}}
{{- define "csi-hostpath.localSidecars" -}}
{{- $nodeName := dict "name" "NODE_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "spec.nodeName")) -}}
{{- $env := list
      $nodeName
      (dict "name" "NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
      (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) -}}
{{- $args := list
      "--feature-gates=Topology=true"
      "--extra-create-metadata"
      (printf "--default-fstype=%s" .Values.storageClasses.fsType)
      "--node-deployment=true"
      "--node-deployment-immediate-binding=true"
      "--strict-topology=true"
      "--immediate-topology=false"
      "--enable-capacity"
      "--capacity-ownerref-level=1" -}}
{{- include "csi-hostpath.sidecar" (dict "root" . "name" "csi-provisioner" "port" "provisioner"
      "values" .Values.sidecars.provisioner "election" false "args" $args "env" $env) }}
{{- if include "csi-hostpath.snapshotsEnabled" . }}
{{ include "csi-hostpath.sidecar" (dict "root" . "name" "csi-snapshotter" "port" "snapshotter"
      "values" .Values.sidecars.snapshotter "election" false
      "args" (list "--extra-create-metadata" "--node-deployment=true"
        "--feature-gates=CSIVolumeGroupSnapshot=false") "env" (list $nodeName)) }}
{{- end }}
{{- end -}}
