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

{{/* The Secret holding the Redis password: the user's (redis.auth.existingSecret),
the bundled one's, or the external Redis's. */}}
{{- define "bucketscan.redisPasswordSecret" -}}
{{- if not .Values.redis.bundled -}}
{{- .Values.redis.external.passwordSecret -}}
{{- else if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecret -}}
{{- else -}}
{{- printf "%s-redis" (include "bucketscan.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The key of the password in that Secret. */}}
{{- define "bucketscan.redisPasswordKey" -}}
{{- if not .Values.redis.bundled -}}
{{- .Values.redis.external.passwordKey -}}
{{- else if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecretKey -}}
{{- else -}}
password
{{- end -}}
{{- end -}}

{{/* The Redis image: pinned by tag, and by digest when redis.image.digest is set. */}}
{{- define "bucketscan.redisImage" -}}
{{- $image := printf "%s:%s" .Values.redis.image.repository .Values.redis.image.tag -}}
{{- with .Values.redis.image.digest -}}
{{- $image = printf "%s@%s" $image . -}}
{{- end -}}
{{- $image -}}
{{- end -}}

{{/* Labels of every pod the operator starts for a scan (desired.rs: labels()). */}}
{{- define "bucketscan.scanPodLabels" -}}
app.kubernetes.io/name: bucketscan
app.kubernetes.io/managed-by: bucketscan-operator
{{- end -}}
