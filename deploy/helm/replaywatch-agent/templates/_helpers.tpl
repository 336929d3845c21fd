{{/*
The chart name, or nameOverride: the app.kubernetes.io/name label.
*/}}
{{- define "replaywatch-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride, else the release name when it
contains the chart name ("replaywatch-agent" gives the kustomize base's
names), else RELEASE-CHART. 63 characters at most (a label value).
*/}}
{{- define "replaywatch-agent.fullname" -}}
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

{{/*
chart-version, the helm.sh/chart label.
*/}}
{{- define "replaywatch-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels the DaemonSet selects its pods by. They are immutable once
installed: never add to them.
*/}}
{{- define "replaywatch-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "replaywatch-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The pods' labels: the selector's, the component, and podLabels.
*/}}
{{- define "replaywatch-agent.podLabels" -}}
{{ include "replaywatch-agent.selectorLabels" . }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: replaywatch
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Every object's labels.
*/}}
{{- define "replaywatch-agent.labels" -}}
helm.sh/chart: {{ include "replaywatch-agent.chart" . }}
{{ include "replaywatch-agent.selectorLabels" . }}
app.kubernetes.io/component: agent
app.kubernetes.io/part-of: replaywatch
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount the pods run as.
*/}}
{{- define "replaywatch-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "replaywatch-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name the existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}: repository:tag, and
@digest when one is given. Called with (list IMAGE DEFAULT-TAG).
*/}}
{{- define "replaywatch-agent.imageRef" -}}
{{- $image := index . 0 }}
{{- $tag := default (index . 1) $image.tag }}
{{- if not (or $tag $image.digest) }}
{{- fail (printf "image %s: set a tag or a digest (an empty one would mean latest)" $image.repository) }}
{{- end }}
{{- $ref := $image.repository }}
{{- if $tag }}
{{- $ref = printf "%s:%s" $ref $tag }}
{{- end }}
{{- if $image.digest }}
{{- $ref = printf "%s@%s" $ref $image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
The metrics port, from config.listen (":PORT").
*/}}
{{- define "replaywatch-agent.port" -}}
{{- $port := trimPrefix ":" .Values.config.listen | atoi }}
{{- if or (lt $port 1) (gt $port 65535) }}
{{- fail (printf "config.listen %q: the port must be 1 to 65535" .Values.config.listen) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
The OTLP listeners that are set (config.otlp), as JSON {"otlp-grpc": PORT,
"otlp-http": PORT}: the container ports' names and numbers.
values.schema.json checks each address; this refuses two listeners on one
port (the pod could not declare both hostPorts, the agent not bind both).
*/}}
{{- define "replaywatch-agent.otlpPorts" -}}
{{- $ports := dict }}
{{- $taken := dict (include "replaywatch-agent.port" .) "listen" }}
{{- range $name, $addr := dict "grpc" .Values.config.otlp.grpc "http" .Values.config.otlp.http }}
{{- if $addr }}
{{- $port := regexFind "[0-9]+$" $addr }}
{{- with get $taken $port }}
{{- fail (printf "config.otlp.%s %q: port %s is already config.%s's" $name $addr $port .) }}
{{- end }}
{{- $_ := set $taken $port (printf "otlp.%s" $name) }}
{{- $_ := set $ports (printf "otlp-%s" $name) (atoi $port) }}
{{- end }}
{{- end }}
{{- toJson $ports }}
{{- end }}

{{/*
The Secret the chart creates when clickhouse.password or hashKey.value is
set, and whether it is created.
*/}}
{{- define "replaywatch-agent.secretName" -}}
{{- include "replaywatch-agent.fullname" . }}
{{- end }}

{{- define "replaywatch-agent.createSecret" -}}
{{- if or .Values.clickhouse.password .Values.hashKey.value }}true{{ end }}
{{- end }}

{{/*
The hash key file: config.hashKeyFile, else hash.key in the spool.
*/}}
{{- define "replaywatch-agent.hashKeyFile" -}}
{{- default (printf "%s/hash.key" (trimSuffix "/" .Values.clickhouse.spoolDir)) .Values.config.hashKeyFile }}
{{- end }}

{{/*
agent.yaml, from the values. Decoded strictly by the agent (an unknown key
is an error): only keys of cmd/replaywatch/agentconfig.go.
*/}}
{{- define "replaywatch-agent.config" -}}
{{- $otlp := .Values.config.otlp }}
{{- if and (has "none" .Values.config.interfaces) (or (gt (len .Values.config.interfaces) 1) (not (or $otlp.grpc $otlp.http))) }}
{{- fail "config.interfaces [none] (no packet capture) stands alone and needs config.otlp.grpc or config.otlp.http: the agent would watch nothing" }}
{{- end }}
# Rendered by the replaywatch-agent chart from its values (config,
# clickhouse). Flags and REPLAYWATCH_* variables win over this file.
interfaces:
{{- range .Values.config.interfaces }}
  - {{ toJson . }}
{{- end }}
ports:
{{- range .Values.config.ports }}
  - {{ int64 . }}
{{- end }}
workers: {{ int64 .Values.config.workers }}
listen: {{ toJson .Values.config.listen }}
{{- if or $otlp.grpc $otlp.http }}
# OpenTelemetry traces in (docs/otlp.md).
{{- end }}
{{- with $otlp.grpc }}
otlp_grpc: {{ toJson . }}
{{- end }}
{{- with $otlp.http }}
otlp_http: {{ toJson . }}
{{- end }}
clickhouse:
  # The password comes from REPLAYWATCH_CLICKHOUSE_PASSWORD, never from here.
  dsn: {{ toJson .Values.clickhouse.dsn }}
  {{- if .Values.clickhouse.applySchema }}
  # Each agent creates or migrates the schema when it starts.
  apply_schema: true
  {{- end }}
  spool_dir: {{ toJson .Values.clickhouse.spoolDir }}
  max_spool_bytes: {{ int64 .Values.clickhouse.maxSpoolBytes }}
hash_key_file: {{ include "replaywatch-agent.hashKeyFile" . | toJson }}
{{- with .Values.config.limits }}
limits:
{{- range $key, $name := dict "maxConnections" "max_connections" "maxPagesTotal" "max_pages_total" "maxSessions" "max_sessions" }}
{{- if hasKey $.Values.config.limits $key }}
  {{ $name }}: {{ int64 (get $.Values.config.limits $key) }}
{{- end }}
{{- end }}
{{- end }}
# The node column of every row is --node=$(NODE_NAME), from the downward API.
{{- end }}
