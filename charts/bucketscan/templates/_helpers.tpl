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

{{/* Images a BucketScan may name in spec.workers.image, comma-separated:
worker.allowedImages, or the worker image's own repository when it is empty
(["*"]: any image). */}}
{{- define "bucketscan.allowedImages" -}}
{{- join "," (default (list .Values.worker.image.repository) .Values.worker.allowedImages) -}}
{{- end -}}

{{/* The operator's rules in a namespace that runs scans (rbac.yaml). */}}
{{- define "bucketscan.scanNamespaceRules" -}}
# The scan's worker Deployment: watched (list, watch) to wake its scan,
# read (get) before every write to check it is the scan's own, written by
# server-side apply (create, patch), deleted when the scan ends.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
# The scan's Jobs (merge; plan, replan and delete-parts for scans on their
# pods' identity): the same verbs, the same reasons.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
# Why a scan's worker and Job pods do not run (condition WorkersReady, a
# plan Job's exit code): list by the scan's labels. Never get, watch nor exec.
- apiGroups: [""]
  resources: [pods]
  verbs: [list]
# The credentials and CA Secrets a scan names (get, by name: never list
# nor watch) and the scan's Redis Secret (get first, then create or patch;
# the chart's admission policy allows only Opaque ones).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
{{- end -}}
