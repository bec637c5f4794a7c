{{/* Names: <release>-qwen3-tts, truncated to the 63 characters DNS labels allow. */}}
{{- define "qwen3-tts.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "qwen3-tts.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Per-role resource name; the role suffix must survive, so the prefix is cut to 50. */}}
{{- define "qwen3-tts.roleName" -}}
{{- printf "%s-%s" (include "qwen3-tts.fullname" .root | trunc 50 | trimSuffix "-") .role }}
{{- end }}

{{- define "qwen3-tts.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "qwen3-tts.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one role: {root, role}. Services, PDBs and HPAs select with exactly these. */}}
{{- define "qwen3-tts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qwen3-tts.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "qwen3-tts.roleLabels" -}}
{{ include "qwen3-tts.labels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "qwen3-tts.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qwen3-tts.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "qwen3-tts.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* In-cluster DNS name of a role's headless Service: {root, role}. */}}
{{- define "qwen3-tts.headlessHost" -}}
{{ include "qwen3-tts.roleName" . }}.{{ .root.Release.Namespace }}.svc
{{- end }}

{{/* Native gRPC probes on the role's health port: {port, probes}. */}}
{{- define "qwen3-tts.grpcProbes" -}}
startupProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ .probes.startup.periodSeconds }}
  failureThreshold: {{ .probes.startup.failureThreshold }}
readinessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ .probes.readiness.periodSeconds }}
  failureThreshold: {{ .probes.readiness.failureThreshold }}
livenessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ .probes.liveness.periodSeconds }}
  failureThreshold: {{ .probes.liveness.failureThreshold }}
{{- end }}

{{/* Environment shared by every role: hub token, pod IP. */}}
{{- define "qwen3-tts.commonEnv" -}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
{{- if .Values.model.hfTokenSecret.name }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.model.hfTokenSecret.name }}, key: {{ .Values.model.hfTokenSecret.key }}}
{{- end }}
{{- end }}

{{/* Resources with the role's GPU count added as nvidia.com/gpu (requests = limits for extended resources). */}}
{{- define "qwen3-tts.gpuResources" -}}
{{- $res := deepCopy (default dict .values.resources) }}
{{- if gt (int .values.gpus) 0 }}
{{- $limits := default dict $res.limits }}
{{- $_ := set $limits "nvidia.com/gpu" (int .values.gpus) }}
{{- $_ := set $res "limits" $limits }}
{{- end }}
{{- toYaml $res }}
{{- end }}

{{/* Volumes every pod mounts: the model cache at /cache. */}}
{{- define "qwen3-tts.cacheVolume" -}}
- name: model-cache
{{- if .Values.modelCache.existingClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.modelCache.existingClaim }}}
{{- else }}
  emptyDir: {sizeLimit: {{ .Values.modelCache.sizeLimit }}}
{{- end }}
{{- end }}
