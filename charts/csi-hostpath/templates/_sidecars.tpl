{{/*
One kubernetes-csi controller sidecar (provisioner, attacher, resizer, snapshotter), called with
(dict "root" $ "name" "csi-provisioner" "port" "provisioner" "values" $.Values.sidecars.provisioner
"election" true "args" (list ...)). Every one of them serves --http-endpoint: /metrics, and with
leader election /healthz/leader-election, which upstream recommends as the liveness probe so that a
leader cut off from the API server is restarted (external-provisioner README, "HTTP endpoint";
external-attacher deploy/kubernetes/deployment.yaml of v4.13.1).
*/}}
{{- define "csi-hostpath.sidecar" -}}
{{- $root := .root -}}
{{- $v := .values -}}
- name: {{ .name }}
  image: {{ include "csi-hostpath.image" $v.image }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - --csi-address={{ include "csi-hostpath.socketPath" $root }}
    - --v={{ $root.Values.sidecars.logVerbosity }}
    - --timeout={{ $root.Values.sidecars.timeout }}
    - --http-endpoint=:{{ $v.httpPort }}
    - --kube-api-qps={{ $root.Values.sidecars.kubeAPIQPS }}
    - --kube-api-burst={{ $root.Values.sidecars.kubeAPIBurst }}
    {{- if .election }}
    - --leader-election
    {{- end }}
    {{- range .args }}
    - {{ . }}
    {{- end }}
  {{- with get . "env" }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: {{ .port }}
      containerPort: {{ $v.httpPort }}
      protocol: TCP
  {{- if .election }}
  livenessProbe:
    httpGet:
      path: /healthz/leader-election
      port: {{ .port }}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 10
    failureThreshold: 1
  {{- end }}
  securityContext:
    {{- include "csi-hostpath.sidecarSecurityContext" $root | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  volumeMounts:
    - name: socket-dir
      mountPath: {{ include "csi-hostpath.socketDir" $root }}
{{- end -}}

{{/*
The image of a kubelet-facing helper (the registrar, the liveness probe), called with (dict "root"
$ "values" $.Values.sidecars.X). implementation upstream (the default) runs the kubernetes-csi
image, whose entrypoint takes the flags. implementation csi-hostpath runs the driver's own image,
whose entrypoint is `csi-hostpath`: the same flags then follow the subcommand
(csi-hostpath.helperCommand).
*/}}
{{- define "csi-hostpath.helperImage" -}}
{{- $image := .root.Values.driver.image -}}
{{- if eq .values.implementation "upstream" -}}
{{- $image = .values.image -}}
{{- end -}}
image: {{ include "csi-hostpath.image" $image }}
imagePullPolicy: {{ $image.pullPolicy }}
{{- end -}}

{{/* The subcommand that leads the args of a helper in the driver's image, or "" upstream. */}}
{{- define "csi-hostpath.helperCommand" -}}
{{- if ne .values.implementation "upstream" -}}
{{- .command -}}
{{- end -}}
{{- end -}}

{{/*
The liveness-probe container of a pod whose driver serves its socket in socket-dir: call with
(dict "root" $ "port" PORT). It turns the driver's Probe into GET /healthz on PORT, which the
driver container's own livenessProbe asks. Flags of livenessprobe v2.19.0 only
(cmd/livenessprobe/main.go), which `csi-hostpath livenessprobe` takes too; --health-port is
deprecated there, so --http-endpoint it is.
*/}}
{{- define "csi-hostpath.livenessSidecar" -}}
{{- $root := .root -}}
{{- $v := $root.Values.sidecars.livenessProbe -}}
- name: liveness-probe
  {{- include "csi-hostpath.helperImage" (dict "root" $root "values" $v) | nindent 2 }}
  args:
    {{- with include "csi-hostpath.helperCommand" (dict "values" $v "command" "livenessprobe") }}
    - {{ . }}
    {{- end }}
    - --csi-address={{ include "csi-hostpath.socketPath" $root }}
    - --http-endpoint=:{{ .port }}
    - --probe-timeout={{ $v.probeTimeout }}
  securityContext:
    {{- include "csi-hostpath.sidecarSecurityContext" $root | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  volumeMounts:
    - name: socket-dir
      mountPath: {{ include "csi-hostpath.socketDir" $root }}
{{- end -}}
