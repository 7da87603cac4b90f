{{/* The prefix of every object's name: fullnameOverride, else RELEASE-NAME
(NAME: nameOverride or the chart's name), or RELEASE alone when it already
holds NAME. Labels and selectors keep app.kubernetes.io/name: bucketscan, so
an override changes names only. */}}
{{- define "bucketscan.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
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

{{/* An image of the chart (dict "image" .Values.image "appVersion"
.Chart.AppVersion): REPOSITORY@DIGEST when image.digest is set (the tag is
then ignored: the digest alone names the bytes), else REPOSITORY:TAG, the
tag defaulting to the chart's appVersion. */}}
{{- define "bucketscan.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The operator's image (its pod and the helm test pod). */}}
{{- define "bucketscan.operatorImage" -}}
{{- include "bucketscan.image" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* The default image of scans' worker, plan and merge pods. */}}
{{- define "bucketscan.workerImage" -}}
{{- include "bucketscan.image" (dict "image" .Values.worker.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* imagePullSecrets of the pods in the release namespace (operator, Redis,
helm test), as the pod spec takes them: [{name: SECRET}]. */}}
{{- define "bucketscan.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . | indent 2 }}
{{- end -}}
{{- end -}}

{{/* operator.scanNamespaceSelector as a label selector string
(`k=v,k in (a,b),k notin (c),k,!k`), for --scan-namespace-selector; empty
when no selector is set. */}}
{{- define "bucketscan.scanNamespaceSelector" -}}
{{- $sel := .Values.operator.scanNamespaceSelector | default dict -}}
{{- $terms := list -}}
{{- range $k, $v := ($sel.matchLabels | default dict) -}}
{{- $terms = append $terms (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- range ($sel.matchExpressions | default list) -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms .key -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!%s" .key) -}}
{{- else -}}
{{- fail (printf "operator.scanNamespaceSelector: unknown operator %q (In, NotIn, Exists, DoesNotExist)" .operator) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
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
