{{/*
Helpers. Every helper takes a context dict, not ".":
  root:    the top-level template context of the chart doing the rendering (for .Release)
  values:  handoff's values (.Values here; .Values.handoff in an owner chart that has this
           chart as a dependency named "handoff")
  sidecar: true when rendering the container for an owner's pod
so that the public sidecar templates below render the same names from an owner chart as this
chart renders for its own objects (the ConfigMap in particular).
*/}}

{{- define "handoff.name" -}}
{{- default "handoff" .values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "handoff.fullname" -}}
{{- if .values.fullnameOverride -}}
{{- .values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "handoff.name" . -}}
{{- if contains $name .root.Release.Name -}}
{{- .root.Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .root.Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "handoff.configMapName" -}}
{{- printf "%s-config" (include "handoff.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{- define "handoff.selectorLabels" -}}
app.kubernetes.io/name: {{ include "handoff.name" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "handoff.labels" -}}
{{ include "handoff.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .values.mode }}
app.kubernetes.io/part-of: handoff
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "handoff.serviceAccountName" -}}
{{- if .values.serviceAccount.create -}}
{{- default (include "handoff.fullname" .) .values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "handoff.image" -}}
{{- $img := .values.image -}}
{{- if $img.digest -}}
{{- printf "%s:%s@%s" $img.repository $img.tag $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository $img.tag -}}
{{- end -}}
{{- end -}}

{{/*
The handoff.toml the ConfigMap holds: the user's `config` plus the [telemetry] and [shutdown]
tables the chart owns (so the listen port, probes and grace periods agree).
*/}}
{{- define "handoff.configToml" -}}
{{- $v := .values -}}
# Rendered by the handoff Helm chart. Connection URLs come from the environment
# (HANDOFF_DATABASE__URL / HANDOFF_REDIS__URL or their *_FILE forms), never from this file.
{{ trim $v.config }}

# --- added by the chart (values: telemetry, gracePeriodSeconds) ---
[telemetry]
listen = "0.0.0.0:{{ $v.telemetry.port }}"
log_format = {{ $v.telemetry.logFormat | quote }}
log_level = {{ $v.telemetry.logLevel | quote }}

[shutdown]
grace_period = "{{ $v.gracePeriodSeconds }}s"
{{- end -}}

{{/* Checks the schema cannot express. Called by the ConfigMap, which every mode renders. */}}
{{- define "handoff.validate" -}}
{{- $v := .values -}}
{{- if eq (lower $v.image.tag) "latest" -}}
{{- fail "image.tag must be a pinned version, not \"latest\" (the image built from this repository is tagged with the crate version, e.g. 0.1.0)" -}}
{{- end -}}
{{- if le (int $v.terminationGracePeriodSeconds) (int $v.gracePeriodSeconds) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be longer than gracePeriodSeconds (%d, handoff's shutdown.grace_period): Kubernetes would SIGKILL handoff before its drain ends" (int $v.terminationGracePeriodSeconds) (int $v.gracePeriodSeconds)) -}}
{{- end -}}
{{- if not (and $v.secrets.databaseUrl.name $v.secrets.databaseUrl.key) -}}
{{- fail "secrets.databaseUrl.name and secrets.databaseUrl.key are required: the Secret and key holding the database URL, postgres:// or mysql:// (handoff reads it from HANDOFF_DATABASE__URL)" -}}
{{- end -}}
{{- if and $v.secrets.redisUrl.name (not $v.secrets.redisUrl.key) -}}
{{- fail "secrets.redisUrl.key is required when secrets.redisUrl.name is set" -}}
{{- end -}}
{{- if regexMatch "(?m)^\\s*\\[\\s*(telemetry|shutdown)\\s*\\]|(?m)^\\s*(telemetry|shutdown)\\s*\\." $v.config -}}
{{- fail "config must not contain [telemetry] or [shutdown]: the chart renders them from values telemetry.* and gracePeriodSeconds" -}}
{{- end -}}
{{- if and $v.secrets.asFiles (regexMatch "(?m)^\\s*url(_file)?\\s*=" $v.config) -}}
{{- fail "config must not set url or url_file when secrets.asFiles is true: the chart sets HANDOFF_*__URL_FILE and handoff rejects url and url_file both set" -}}
{{- end -}}
{{- if and $v.monitoring.serviceMonitor.enabled (or (ne $v.mode "deployment") (not $v.service.enabled)) -}}
{{- fail "monitoring.serviceMonitor needs mode: deployment and service.enabled: true; in sidecar mode use monitoring.podMonitor with a selector for the owner's pods" -}}
{{- end -}}
{{- if and $v.monitoring.podMonitor.enabled (eq $v.mode "sidecar") (empty $v.monitoring.podMonitor.selector) -}}
{{- fail "monitoring.podMonitor.selector is required in sidecar mode: the labels of the owner service's pods" -}}
{{- end -}}
{{- if and $v.podDisruptionBudget.enabled (eq (kindOf $v.podDisruptionBudget.minAvailable) (kindOf $v.podDisruptionBudget.maxUnavailable)) -}}
{{- fail "podDisruptionBudget: set exactly one of maxUnavailable and minAvailable (the other null)" -}}
{{- end -}}
{{- end -}}

{{/* Container securityContext: fixed hardening; only the numeric ids come from values. */}}
{{- define "handoff.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .values.securityContext.runAsUser }}
runAsGroup: {{ .values.securityContext.runAsGroup }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The handoff container, as one item of a containers: list. */}}
{{- define "handoff.container" -}}
{{- $v := .values -}}
- name: {{ ternary $v.sidecar.containerName "handoff" (default false .sidecar) }}
  image: {{ include "handoff.image" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if .native }}
  # A native sidecar: runs beside the owner's containers, started before and stopped after them.
  restartPolicy: Always
  {{- end }}
  args:
    - run
    - --config
    - /etc/handoff/handoff.toml
  ports:
    - name: handoff-metrics
      containerPort: {{ $v.telemetry.port }}
      protocol: TCP
    {{- if $v.admin.port }}
    - name: handoff-admin
      containerPort: {{ $v.admin.port }}
      protocol: TCP
    {{- end }}
  env:
    {{- if $v.secrets.asFiles }}
    - name: HANDOFF_DATABASE__URL_FILE
      value: /var/run/secrets/handoff/database-url
    {{- if $v.secrets.redisUrl.name }}
    - name: HANDOFF_REDIS__URL_FILE
      value: /var/run/secrets/handoff/redis-url
    {{- end }}
    {{- else }}
    - name: HANDOFF_DATABASE__URL
      valueFrom:
        secretKeyRef:
          name: {{ $v.secrets.databaseUrl.name | quote }}
          key: {{ $v.secrets.databaseUrl.key | quote }}
    {{- if $v.secrets.redisUrl.name }}
    - name: HANDOFF_REDIS__URL
      valueFrom:
        secretKeyRef:
          name: {{ $v.secrets.redisUrl.name | quote }}
          key: {{ $v.secrets.redisUrl.key | quote }}
    {{- end }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.probes.startup }}
  {{- if .enabled }}
  startupProbe:
    httpGet:
      path: /healthz
      port: handoff-metrics
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- with $v.probes.liveness }}
  {{- if .enabled }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: handoff-metrics
    initialDelaySeconds: {{ .initialDelaySeconds }}
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- end }}
  {{- if and $v.probes.readiness.enabled (or (not .sidecar) $v.sidecar.gateOwnerReadiness) }}
  {{- with $v.probes.readiness }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: handoff-metrics
    initialDelaySeconds: {{ .initialDelaySeconds }}
    periodSeconds: {{ .periodSeconds }}
    timeoutSeconds: {{ .timeoutSeconds }}
    failureThreshold: {{ .failureThreshold }}
  {{- end }}
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- include "handoff.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    - name: handoff-config
      mountPath: /etc/handoff
      readOnly: true
    {{- if $v.secrets.asFiles }}
    - name: handoff-secrets
      mountPath: /var/run/secrets/handoff
      readOnly: true
    {{- end }}
    {{- range $v.tlsSecrets }}
    - name: handoff-tls-{{ .name }}
      mountPath: /var/run/secrets/handoff-tls/{{ .name }}
      readOnly: true
    {{- end }}
{{- end -}}

{{/* Pod volumes for the container above, as items of a volumes: list. Secret files are 0440:
readable by the pod's fsGroup (the chart's pod sets it to handoff's group). A sidecar lives in
the owner's pod, whose fsGroup the chart does not set: there they stay 0444 unless the owner's
pod sets fsGroup to handoff's group and `sidecar.fsGroupSet` says so. */}}
{{- define "handoff.volumes" -}}
{{- $v := .values -}}
{{- $mode := 0440 -}}
{{- if and .sidecar (not $v.sidecar.fsGroupSet) }}{{ $mode = 0444 }}{{ end -}}
- name: handoff-config
  configMap:
    name: {{ include "handoff.configMapName" . }}
{{- if $v.secrets.asFiles }}
- name: handoff-secrets
  projected:
    defaultMode: {{ $mode }}
    sources:
      - secret:
          name: {{ $v.secrets.databaseUrl.name | quote }}
          items:
            - key: {{ $v.secrets.databaseUrl.key | quote }}
              path: database-url
      {{- if $v.secrets.redisUrl.name }}
      - secret:
          name: {{ $v.secrets.redisUrl.name | quote }}
          items:
            - key: {{ $v.secrets.redisUrl.key | quote }}
              path: redis-url
      {{- end }}
{{- end }}
{{- range $v.tlsSecrets }}
- name: handoff-tls-{{ .name }}
  secret:
    secretName: {{ .secretName | quote }}
    defaultMode: {{ $mode }}
    {{- with .items }}
    items:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* Pod annotations: restart on config change; optional annotation-based scraping. */}}
{{- define "handoff.podAnnotations" -}}
checksum/handoff-config: {{ include "handoff.configToml" . | sha256sum }}
{{- if .values.prometheusScrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .values.telemetry.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* ===== Public templates for an owner chart (mode: sidecar). See docs/how-to/deploy-sidecar-helm.md. =====

In the owner chart (handoff declared as a dependency named "handoff", values under handoff:):

  spec:
    template:
      metadata:
        annotations:
          {{- include "handoff.sidecarPodAnnotations" (dict "root" . "values" .Values.handoff) | nindent 10 }}
      spec:
        terminationGracePeriodSeconds: 30   # > handoff.gracePeriodSeconds
        {{- with include "handoff.sidecarInitContainer" (dict "root" . "values" .Values.handoff) }}
        initContainers:
          {{- . | nindent 10 }}
        {{- end }}
        containers:
          - name: app
            ...
          {{- include "handoff.sidecarContainer" (dict "root" . "values" .Values.handoff) | nindent 10 }}
        volumes:
          {{- include "handoff.sidecarVolumes" (dict "root" . "values" .Values.handoff) | nindent 10 }}
*/}}
{{- define "handoff.sidecarContainer" -}}
{{- if not (include "handoff.sidecarNative" .) -}}
{{- include "handoff.container" (dict "root" .root "values" .values "sidecar" true) -}}
{{- end -}}
{{- end -}}

{{- define "handoff.sidecarInitContainer" -}}
{{- if include "handoff.sidecarNative" . -}}
{{- include "handoff.container" (dict "root" .root "values" .values "sidecar" true "native" true) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the sidecar renders as a native sidecar (init container, restartPolicy:
Always), "" when as a plain container. auto: native from Kubernetes 1.29, where the feature is
on by default. */}}
{{- define "handoff.sidecarNative" -}}
{{- $native := toString .values.sidecar.native -}}
{{- if or (eq $native "true") (and (eq $native "auto") (semverCompare ">=1.29.0-0" .root.Capabilities.KubeVersion.Version)) -}}
true
{{- end -}}
{{- end -}}

{{- define "handoff.sidecarVolumes" -}}
{{- include "handoff.volumes" (dict "root" .root "values" .values "sidecar" true) -}}
{{- end -}}

{{- define "handoff.sidecarPodAnnotations" -}}
{{- include "handoff.podAnnotations" (dict "root" .root "values" .values "sidecar" true) -}}
{{- end -}}
