{{/*
Names. Object names are capped at 52 characters so that a suffix such as "-controller" still
fits the 63 characters of a label value.
*/}}
{{- define "csi-hostpath.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "csi-hostpath.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "csi-hostpath.name" . -}}
{{- if eq .Release.Name $name -}}
{{- $name -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "csi-hostpath.labels" -}}
app.kubernetes.io/name: {{ include "csi-hostpath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: call with (list $ "controller"). */}}
{{- define "csi-hostpath.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "csi-hostpath.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/*
An image reference. The schema already refuses an empty tag and `latest`; this check repeats it
so that a schema skipped with --skip-schema-validation still cannot deploy an unpinned image.
*/}}
{{- define "csi-hostpath.image" -}}
{{- $tag := toString .tag -}}
{{- if or (eq $tag "") (eq $tag "latest") -}}
{{- fail (printf "image %s must be pinned to a tag (got %q)" .repository $tag) -}}
{{- end -}}
{{- printf "%s:%s" .repository $tag -}}
{{- end -}}

{{/*
"true" when snapshot support is rendered: asked for AND served by the cluster. Without the API the
snapshotter sidecar would only log errors, and a VolumeSnapshotClass would fail to install.
*/}}
{{- define "csi-hostpath.snapshotsEnabled" -}}
{{- if and .Values.snapshots.enabled (.Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1") -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when group snapshots are rendered: snapshots are, group snapshots are asked for, AND the
cluster serves the group snapshot API.
*/}}
{{- define "csi-hostpath.groupSnapshotsEnabled" -}}
{{- if and (include "csi-hostpath.snapshotsEnabled" .) .Values.snapshots.groups.enabled (.Capabilities.APIVersions.Has "groupsnapshot.storage.k8s.io/v1beta2") -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when changed-block tracking is rendered: snapshots are, it is asked for, the pool is shared
(the sidecar runs beside the one controller), AND the cluster serves the SnapshotMetadataService
API. The Service and the object's address name the same Service: one definition for both.
*/}}
{{- define "csi-hostpath.snapshotMetadataEnabled" -}}
{{- if and (include "csi-hostpath.snapshotsEnabled" .) .Values.snapshots.metadata.enabled (not (include "csi-hostpath.localShape" .)) (.Capabilities.APIVersions.Has "cbt.storage.k8s.io/v1beta1") -}}
true
{{- end -}}
{{- end -}}

{{- define "csi-hostpath.snapshotMetadataService" -}}
{{- printf "%s-snapshot-metadata" (include "csi-hostpath.fullname" .) -}}
{{- end -}}

{{/*
Sockets. Inside every pod the driver listens on /csi/csi.sock. In the node pods /csi is the host
directory below, so the path the kubelet is told (the registration path) is that directory plus
the socket's file name: one definition for both keeps them from drifting apart.
*/}}
{{- define "csi-hostpath.socketDir" -}}/csi{{- end -}}
{{- define "csi-hostpath.socketName" -}}csi.sock{{- end -}}
{{- define "csi-hostpath.socketPath" -}}
{{- printf "%s/%s" (include "csi-hostpath.socketDir" .) (include "csi-hostpath.socketName" .) -}}
{{- end -}}
{{- define "csi-hostpath.nodePluginHostDir" -}}
{{- printf "%s/plugins/%s" (.Values.node.kubeletDir | trimSuffix "/") .Values.driverName -}}
{{- end -}}
{{- define "csi-hostpath.registrationPath" -}}
{{- printf "%s/%s" (include "csi-hostpath.nodePluginHostDir" .) (include "csi-hostpath.socketName" .) -}}
{{- end -}}

{{/* The driver flags the controller and the node plugin share. */}}
{{- define "csi-hostpath.driverArgs" -}}
- serve
- --endpoint=unix://{{ include "csi-hostpath.socketPath" . }}
- --node-id=$(NODE_ID)
- --driver-name={{ .Values.driverName }}
- --pool-scope={{ .Values.pool.scope }}
- --pool-dir={{ .Values.pool.hostPath }}
- --log-level={{ .Values.driver.logLevel }}
- --max-volume-size={{ int64 .Values.driver.maxVolumeSize }}
- --max-volumes-per-node={{ int64 .Values.driver.maxVolumesPerNode }}
- --overcommit-ratio={{ .Values.driver.overcommitRatio }}
- --node-lost-after={{ .Values.driver.nodeLostAfter }}
- --heartbeat-interval={{ .Values.driver.heartbeatInterval }}
- --fence-interval={{ .Values.driver.fenceInterval }}
- --node-grace={{ .Values.driver.nodeGrace }}
{{- if .Values.metrics.enabled }}
- --metrics-address=:{{ .Values.metrics.port }}
{{- end }}
{{- if .Values.inline.enabled }}
- --allow-inline-volumes
- --max-inline-size={{ int64 .Values.inline.maxSize }}
{{- end }}
{{- end -}}

{{/* The node ID is the Kubernetes node name, which is what the attacher passes to ControllerPublish. */}}
{{- define "csi-hostpath.nodeIdEnv" -}}
- name: NODE_ID
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end -}}

{{/*
Security context of the sidecars: they only talk to the driver's socket and the API server, so they
keep no capability. They stay uid 0 because the driver creates its socket 0600, owned by root.
*/}}
{{- define "csi-hostpath.sidecarSecurityContext" -}}
runAsUser: 0
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
"true" in the many-machines shape (pool.scope local): every node's DaemonSet pod is the controller
of its own pool, and there is no central controller. docs/kind-many-machines.md says why.
*/}}
{{- define "csi-hostpath.localShape" -}}
{{- if eq .Values.pool.scope "local" -}}
true
{{- end -}}
{{- end -}}

{{/*
A binding of one role of this chart to one of its service accounts: call with (dict "root" $
"kind" "ClusterRole"|"Role" "role" "provisioner" "account" NAME). A Role gets a RoleBinding in the
release namespace.
*/}}
{{- define "csi-hostpath.binding" -}}
{{- $root := .root -}}
{{- $fullname := include "csi-hostpath.fullname" $root -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ .kind }}Binding
metadata:
  name: {{ $fullname }}-{{ .role }}
  {{- if eq .kind "Role" }}
  namespace: {{ $root.Release.Namespace }}
  {{- end }}
  labels:
    {{- include "csi-hostpath.labels" $root | nindent 4 }}
subjects:
  - kind: ServiceAccount
    name: {{ .account }}
    namespace: {{ $root.Release.Namespace }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ .kind }}
  name: {{ $fullname }}-{{ .role }}
{{- end -}}

{{/*
"true" when the driver serves its ledger's read-only view of a volume (--ledger-view, on the
metrics port) for `kubectl csi-hostpath why`: asked for, and the metrics port is there.
*/}}
{{- define "csi-hostpath.ledgerViewEnabled" -}}
{{- if and .Values.why.enabled .Values.metrics.enabled -}}
true
{{- end -}}
{{- end -}}

{{/*
The Service the plugin reaches that view through (the API server's service proxy), and the one
id a reader's RBAC may proxy to: NAME:PORT, as the request's URL names it.
*/}}
{{- define "csi-hostpath.ledgerService" -}}
{{- printf "%s-ledger" (include "csi-hostpath.fullname" .) -}}
{{- end -}}

{{- define "csi-hostpath.ledgerRoute" -}}
{{- $fullname := include "csi-hostpath.fullname" . -}}
{{- if include "csi-hostpath.localShape" . -}}
{{- dict "namespace" .Release.Namespace "pods" (printf "app.kubernetes.io/instance=%s,app.kubernetes.io/component=node" .Release.Name) "port" (toString .Values.metrics.port) | toJson -}}
{{- else -}}
{{- dict "namespace" .Release.Namespace "service" (include "csi-hostpath.ledgerService" .) "port" "metrics" "controllerPod" (printf "%s-controller-0" $fullname) | toJson -}}
{{- end -}}
{{- end -}}
