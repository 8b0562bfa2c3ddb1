{{/*
Shared snippets. Objects are named <fullname>-<component>; fullname is the release name when it
contains "tokenfleet" (release "tokenfleet": tokenfleet-operator, tokenfleet-gateway, ...), else
<release>-tokenfleet. The operator is cluster-wide: run one release per cluster (a second one,
say for a test, coexists by name but both operators would act on the same resources).
*/}}

{{- define "tokenfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "tokenfleet.saltSecret" -}}
{{ .Values.gateway.saltSecretName | default (printf "%s-gateway-salt" (include "tokenfleet.fullname" .)) }}
{{- end }}

{{- define "tokenfleet.engineKeySecret" -}}
{{ .Values.engineKeySecretName | default (printf "%s-engine-key" (include "tokenfleet.fullname" .)) }}
{{- end }}

{{- define "tokenfleet.redisSecret" -}}
{{ .Values.redis.passwordSecretName | default (printf "%s-redis" (include "tokenfleet.fullname" .)) }}
{{- end }}

{{- define "tokenfleet.leaseName" -}}
{{ .Values.operator.leaderElection.leaseName | default (printf "%s-operator" (include "tokenfleet.fullname" .)) }}
{{- end }}

{{- define "tokenfleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels every object carries; "component" is passed as .component. */}}
{{- define "tokenfleet.labels" -}}
{{ include "tokenfleet.selector" . }}
app.kubernetes.io/part-of: tokenfleet
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ .root.Chart.Name }}-{{ .root.Chart.Version }}
{{- end }}

{{/* Selector labels (.root, .component): stable across upgrades (a Deployment's selector is
immutable). */}}
{{- define "tokenfleet.selector" -}}
app.kubernetes.io/name: tokenfleet-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}

{{/* KUBERNETES_SERVICE_HOST/PORT when the in-cluster Service is not usable (local platform). */}}
{{- define "tokenfleet.apiEnv" -}}
{{- with .Values.kubernetesService }}
{{- if and .host .port }}
- {name: KUBERNETES_SERVICE_HOST, value: {{ .host | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ .port | toString | quote }}}
{{- end }}
{{- end }}
{{- end }}

{{/* nodeSelector and tolerations: the global ones plus the component's (.c). */}}
{{- define "tokenfleet.scheduling" -}}
{{- $selector := merge (deepCopy .c.nodeSelector) .root.Values.nodeSelector }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with concat .root.Values.tolerations .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .root.Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
A random Secret value generated once: the live Secret's value when it exists (upgrades keep it),
else a new random one. Args: .root, .name (Secret), .key, .length.
*/}}
{{- define "tokenfleet.keptRandom" -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace .name }}
{{- if and $live $live.data (hasKey $live.data .key) }}
{{- index $live.data .key }}
{{- else }}
{{- randAlphaNum (int .length) | b64enc }}
{{- end }}
{{- end }}

{{/* An HTTP probe, or the exec probe that fetches the same URL (hostNetwork: no kubelet dial). */}}
{{- define "tokenfleet.httpProbe" -}}
{{- if eq .mode "exec" }}
exec:
  command:
    {{- range .command }}
    - {{ . | quote }}
    {{- end }}
    - {{ printf "http://127.0.0.1:%d%s" (int .port) .path | quote }}
{{- else }}
httpGet: {path: {{ .path }}, port: {{ .portName }}}
{{- end }}
{{- end }}

{{/* The Redis URL the gateway uses, with the password from the environment. */}}
{{- define "tokenfleet.redisHost" -}}
{{ .Values.redis.host | default (printf "%s-redis.%s.svc" (include "tokenfleet.fullname" .) .Release.Namespace) }}
{{- end }}

{{/*
"true" when the Prometheus Operator objects are rendered, else empty (include returns a string,
and "false" would be true). monitoring.enabled "auto" (the default) renders them when the
cluster serves monitoring.coreos.com/v1: `helm install`/`upgrade` ask the API server's
discovery, which lists both the group-version and group-version/Kind; `helm template` has no
cluster and knows only what `--api-versions monitoring.coreos.com/v1` tells it. true and false
force the choice.
*/}}
{{- define "tokenfleet.monitoring.enabled" -}}
{{- $enabled := .Values.monitoring.enabled }}
{{- if eq (toString $enabled) "auto" }}
{{- if or (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- else if $enabled }}true
{{- end }}
{{- end }}

{{/*
One file of files/monitoring/ (.file; rendered by `make monitoring` from monitoring/) as the
release's objects (.root): in the release namespace, labelled with monitoring.labels so your
Prometheus selects them, every PodMonitor endpoint scraped at monitoring.interval (without it
the Prometheus's own default applies, often 30 s: two scrapes in a 60 s canary window).
*/}}
{{- define "tokenfleet.monitoring.file" -}}
{{- $values := .root.Values.monitoring }}
{{- $text := .root.Files.Get (printf "files/monitoring/%s" .file) }}
{{- $text = $text | replace "  namespace: tokenfleet-system\n" (printf "  namespace: %s\n" .root.Release.Namespace) }}
{{- range $key, $value := $values.labels }}
{{- $text = $text | replace "    app.kubernetes.io/part-of: tokenfleet\n" (printf "    app.kubernetes.io/part-of: tokenfleet\n    %s: %s\n" $key ($value | quote)) }}
{{- end }}
{{- $text | replace "  podMetricsEndpoints:\n  - port: " (printf "  podMetricsEndpoints:\n  - interval: %s\n    port: " $values.interval) }}
{{- end }}
