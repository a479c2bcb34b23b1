{{/* Names, labels and the daemon's configuration, shared by the templates. */}}

{{- define "autouvmd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name: RELEASE-autouvmd, or RELEASE alone when it already says autouvmd. */}}
{{- define "autouvmd.fullname" -}}
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

{{/* The governing Service of the StatefulSet: stable pod DNS names, and DNS for client-side balancing. */}}
{{- define "autouvmd.headlessName" -}}
{{- printf "%s-headless" (include "autouvmd.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{- define "autouvmd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "autouvmd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "autouvmd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "autouvmd.labels" -}}
helm.sh/chart: {{ include "autouvmd.chart" . }}
{{ include "autouvmd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "autouvmd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "autouvmd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "autouvmd.image" -}}
{{- $tag := .Values.image.tag | default (ternary "cuda" "cpu" .Values.gpu.enabled) }}
{{- printf "%s:%s" .Values.image.repository (toString $tag) }}
{{- end }}

{{- define "autouvmd.modelsClaim" -}}
{{- .Values.models.persistence.existingClaim | default (printf "%s-models" (include "autouvmd.fullname" .)) }}
{{- end }}

{{/* A persistence block's storageClassName: "" leaves it out (the default class), "-" sets it empty. */}}
{{- define "autouvmd.storageClass" -}}
{{- if eq . "-" }}
storageClassName: ""
{{- else if . }}
storageClassName: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
autouvmd.yaml: values.config, with the keys the chart owns set from its ports and mount paths (README.md
"Configuration"). The paths are the images' (Dockerfile, deploy/autouvmd.container.yaml).
*/}}
{{- define "autouvmd.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $server := index $cfg "server" | default dict }}
{{- $repository := index $cfg "repository" | default dict }}
{{- $runtime := index $cfg "runtime" | default dict }}
{{- range $key := list "listen" "metrics_listen" "http_listen" }}
{{- if hasKey $server $key }}
{{- fail (printf "config.server.%s is set by the chart: set containerPorts instead" $key) }}
{{- end }}
{{- end }}
{{- if hasKey $repository "path" }}
{{- fail "config.repository.path is set by the chart (/models): use models.persistence instead" }}
{{- end }}
{{- if hasKey $cfg "state_dir" }}
{{- fail "config.state_dir is set by the chart (/state): use state.persistence instead" }}
{{- end }}
{{- if and .Values.models.readOnly (index $repository "generate_default_model") }}
{{- fail "models.readOnly: the daemon writes config.repository.generate_default_model into /models; set it to \"\"" }}
{{- end }}
{{- $_ := set $server "listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.grpc)) }}
{{- $_ := set $server "metrics_listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.metrics)) }}
{{- $_ := set $server "http_listen" (printf "0.0.0.0:%d" (int .Values.containerPorts.http)) }}
{{- $_ := set $repository "path" "/models" }}
{{- if not (index $runtime "backend") }}
{{- $_ := set $runtime "backend" (ternary "cuda" "cpu" .Values.gpu.enabled) }}
{{- end }}
{{- if .Values.adminToken.existingSecret }}
{{- $admin := index $cfg "admin" | default dict }}
{{- $_ := set $admin "token_file" (printf "/var/run/secrets/autouvmd/admin/%s" .Values.adminToken.key) }}
{{- $_ := set $cfg "admin" $admin }}
{{- end }}
{{- if .Values.apiKeys.existingSecret }}
{{- if hasKey $server "api_key_file" }}
{{- fail "config.server.api_key_file is set by the chart from apiKeys.existingSecret" }}
{{- end }}
{{- $_ := set $server "api_key_file" (printf "/var/run/secrets/autouvmd/api-keys/%s" .Values.apiKeys.key) }}
{{- end }}
{{- if .Values.tls.existingSecret }}
{{- $mode := .Values.tls.clientCertificates | toString }}
{{- if not (has $mode (list "none" "verify" "require")) }}
{{- fail (printf "tls.clientCertificates: '%s' is not one of none, verify, require" $mode) }}
{{- end }}
{{- $tls := index $server "tls" | default dict }}
{{- range $key := list "cert_file" "key_file" "client_ca_file" "require_client_cert" }}
{{- if hasKey $tls $key }}
{{- fail (printf "config.server.tls.%s is set by the chart from tls.existingSecret: use tls.clientCertificates" $key) }}
{{- end }}
{{- end }}
{{- $_ := set $tls "cert_file" "/var/run/secrets/autouvmd/tls/tls.crt" }}
{{- $_ := set $tls "key_file" "/var/run/secrets/autouvmd/tls/tls.key" }}
{{- if ne $mode "none" }}
{{- $_ := set $tls "client_ca_file" "/var/run/secrets/autouvmd/tls/ca.crt" }}
{{- $_ := set $tls "require_client_cert" (eq $mode "require") }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- end }}
{{- $_ := set $cfg "server" $server }}
{{- $_ := set $cfg "repository" $repository }}
{{- $_ := set $cfg "runtime" $runtime }}
{{- $_ := set $cfg "state_dir" "/state" }}
{{- toYaml $cfg }}
{{- end }}

{{/* config.server.drain_timeout in whole seconds (the daemon's default: 30s), rounded up. */}}
{{- define "autouvmd.drainSeconds" -}}
{{- $d := dig "server" "drain_timeout" "30s" (.Values.config | default dict) | toString }}
{{- $m := regexFindAll "^([0-9]+)(ms|s|m|h)$" $d 1 }}
{{- if not $m }}
{{- fail (printf "config.server.drain_timeout: %q is not a duration such as 30s, 500ms or 2m" $d) }}
{{- end }}
{{- $n := regexFind "^[0-9]+" $d | int }}
{{- $unit := regexReplaceAll "^[0-9]+" $d "" }}
{{- if eq $unit "ms" }}{{ div (add $n 999) 1000 }}
{{- else if eq $unit "s" }}{{ $n }}
{{- else if eq $unit "m" }}{{ mul $n 60 }}
{{- else }}{{ mul $n 3600 }}
{{- end }}
{{- end }}

{{/* Readiness (startup and readiness probes): native gRPC health, or /readyz on the metrics port where the
gRPC port speaks TLS, which Kubernetes' gRPC probes cannot. */}}
{{- define "autouvmd.readyProbe" -}}
{{- if .tls -}}
httpGet:
  path: /readyz
  port: metrics
{{- else -}}
grpc:
  port: {{ .port }}
{{- end -}}
{{- end }}
