{{/*
Labels of an object of `component` (webhook or controller): the ones manifests/ writes, then
Helm's. Call with (dict "root" $ "component" "webhook").
*/}}
{{- define "kim.labels" -}}
{{ include "kim.selectorLabels" .component }}
app.kubernetes.io/part-of: kim
{{ include "kim.helmLabels" .root }}
{{- end }}

{{/* The labels of the pods of `component` (a string), as their selectors match them. */}}
{{- define "kim.podLabels" -}}
{{ include "kim.selectorLabels" . }}
app.kubernetes.io/part-of: kim
{{- end }}

{{/* Selector labels of `component` (a string). */}}
{{- define "kim.selectorLabels" -}}
app.kubernetes.io/name: kim-{{ . }}
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* Helm's own labels (not in manifests/). */}}
{{- define "kim.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The image reference. */}}
{{- define "kim.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Whether the controller (and the CRD) are part of the release. */}}
{{- define "kim.controller" -}}
{{- if not .Values.guardOnly }}true{{ end }}
{{- end }}

{{/* prometheus.io annotations of a pod serving metrics on `port`. */}}
{{- define "kim.scrapeAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end }}

{{/* The webhook's --allowed-writers. */}}
{{- define "kim.allowedWriters" -}}
{{- .Values.webhook.allowedWriters | default (printf "system:serviceaccount:%s:kim-controller,group:system:masters" .Release.Namespace) }}
{{- end }}
