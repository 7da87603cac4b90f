{{- define "bucketscan.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bucketscan.labels" -}}
app.kubernetes.io/name: bucketscan
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bucketscan.operatorSelector" -}}
app.kubernetes.io/name: bucketscan
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "bucketscan.redisSelector" -}}
app.kubernetes.io/name: bucketscan
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{- define "bucketscan.image" -}}
{{- printf "%s:%s" .repository (default $.chartVersion .tag) -}}
{{- end -}}

{{/* The Secret holding the Redis password: the bundled one's, or the user's. */}}
{{- define "bucketscan.redisPasswordSecret" -}}
{{- if .Values.redis.bundled -}}
{{- printf "%s-redis" (include "bucketscan.fullname" .) -}}
{{- else -}}
{{- .Values.redis.external.passwordSecret -}}
{{- end -}}
{{- end -}}
