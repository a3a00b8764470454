{{/*
One kubernetes-csi controller sidecar (provisioner, attacher, resizer, snapshotter), called with
(dict "root" $ "name" "csi-provisioner" "port" "provisioner" "values" $.Values.sidecars.provisioner
"election" true "args" (list ...)). Every one of them serves --http-endpoint: /metrics, and with
leader election /healthz/leader-election, which upstream recommends as the liveness probe so that a
leader cut off from the API server is restarted (external-provisioner README, "HTTP endpoint";
external-attacher deploy/kubernetes/deployment.yaml of v4.12.0).
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
