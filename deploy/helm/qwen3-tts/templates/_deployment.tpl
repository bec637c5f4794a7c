{{/*
One Deployment for a role. Input dict:
  root    - the chart's top context
  role    - gateway | talker | vocoder (also the container's entry-point argument)
  values  - .Values.<role>
  args    - list of role flags (after the role name)
  ports   - dict name -> containerPort
  healthPort - the gRPC port the native probes call
  voices  - bool: mount the registered-voices volume at /data/voices
*/}}
{{- define "qwen3-tts.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "qwen3-tts.roleName" . }}
  labels:
    {{- include "qwen3-tts.roleLabels" . | nindent 4 }}
spec:
  {{- if not (default dict $v.autoscaling).enabled }}
  replicas: {{ $v.replicaCount }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "qwen3-tts.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "qwen3-tts.selectorLabels" . | nindent 8 }}
      annotations:
        # roll the pods when their engine settings change
        checksum/config: {{ toYaml $v.config | sha256sum }}
        {{- if and $root.Values.metrics.scrapeAnnotations .ports.metrics }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ .ports.metrics | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "qwen3-tts.serviceAccountName" $root }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      # the services drain in-flight streams on SIGTERM
      terminationGracePeriodSeconds: 60
      containers:
        - name: {{ .role }}
          image: {{ include "qwen3-tts.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ .role }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- range $v.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            {{- include "qwen3-tts.commonEnv" $root | nindent 12 }}
          envFrom:
            - configMapRef:
                name: {{ include "qwen3-tts.roleName" . }}
          ports:
            {{- range $name, $port := .ports }}
            - name: {{ $name }}
              containerPort: {{ $port }}
              protocol: TCP
            {{- end }}
          {{- include "qwen3-tts.grpcProbes" (dict "port" .healthPort "probes" $v.probes) | nindent 10 }}
          resources:
            {{- include "qwen3-tts.gpuResources" (dict "values" $v) | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - {name: model-cache, mountPath: /cache}
            {{- if .voices }}
            - {name: voices, mountPath: /data/voices}
            {{- end }}
      volumes:
        {{- include "qwen3-tts.cacheVolume" $root | nindent 8 }}
        {{- if .voices }}
        - name: voices
        {{- if $root.Values.voices.persistence.enabled }}
          persistentVolumeClaim:
            claimName: {{ default (include "qwen3-tts.roleName" (dict "root" $root "role" "voices")) $root.Values.voices.persistence.existingClaim }}
        {{- else }}
          emptyDir: {}
        {{- end }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* The role's engine settings as QWEN3_TTS_<ROLE>_<KEY> env vars: {root, role, values}. */}}
{{- define "qwen3-tts.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "qwen3-tts.roleName" . }}
  labels:
    {{- include "qwen3-tts.roleLabels" . | nindent 4 }}
data:
  {{- $prefix := printf "QWEN3_TTS_%s_" (upper .role) }}
  {{- range $key, $value := .values.config }}
  {{ printf "%s%s" $prefix (upper $key) }}: {{ $value | toString | quote }}
  {{- end }}
{{- end }}

{{/* Headless Service: DNS answers with every ready pod's address, which is how peers discover
     each other. {root, role, ports}. */}}
{{- define "qwen3-tts.headlessService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "qwen3-tts.roleName" . }}
  labels:
    {{- include "qwen3-tts.roleLabels" . | nindent 4 }}
spec:
  clusterIP: None
  # only pods whose health is SERVING are published, so a loading pod gets no traffic
  publishNotReadyAddresses: false
  selector:
    {{- include "qwen3-tts.selectorLabels" . | nindent 4 }}
  ports:
    {{- range $name, $port := .ports }}
    - name: {{ $name }}
      port: {{ $port }}
      targetPort: {{ $name }}
      protocol: TCP
    {{- end }}
{{- end }}

{{/* PodDisruptionBudget: {root, role, values}. */}}
{{- define "qwen3-tts.pdb" -}}
{{- if .values.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "qwen3-tts.roleName" . }}
  labels:
    {{- include "qwen3-tts.roleLabels" . | nindent 4 }}
spec:
  {{- if hasKey .values.pdb "minAvailable" }}
  minAvailable: {{ .values.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .values.pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "qwen3-tts.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}
