{{- define "capi-ipam.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capi-ipam.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "capi-ipam.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The manager image: by digest when one is given (image.digest), else by tag (default: the chart's appVersion). */}}
{{- define "capi-ipam.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "capi-ipam.labels" -}}
app.kubernetes.io/name: {{ include "capi-ipam.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
cluster.x-k8s.io/provider: ipam-in-cluster
{{- end -}}

{{/* The labels of `helm test`'s objects: not the manager's selector labels, or its ReplicaSet would adopt the test
pod, and its PodDisruptionBudget and NetworkPolicy would count and admit it. */}}
{{- define "capi-ipam.testLabels" -}}
app.kubernetes.io/name: {{ include "capi-ipam.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "capi-ipam.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capi-ipam.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "capi-ipam.webhookService" -}}
{{- printf "%s-webhook" (include "capi-ipam.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capi-ipam.certificate" -}}
{{- printf "%s-serving-cert" (include "capi-ipam.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capi-ipam.certSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- printf "%s-webhook-service-cert" (include "capi-ipam.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- required "webhook.certificateSecretName is required when webhook.certManager.enabled is false" .Values.webhook.certificateSecretName -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the metrics serving certificate (cert-manager issues it; Prometheus verifies against its ca.crt). */}}
{{- define "capi-ipam.metricsCertSecret" -}}
{{- printf "%s-metrics-cert" (include "capi-ipam.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Whether the manager serves metrics with the cert-manager certificate. */}}
{{- define "capi-ipam.metricsCertManaged" -}}
{{- if and .Values.webhook.certManager.enabled (not .Values.metrics.insecure) -}}true{{- end -}}
{{- end -}}

{{/* The annotation that makes cert-manager inject the CA, when it issues the certificate. */}}
{{- define "capi-ipam.caInjection" -}}
{{- if .Values.webhook.certManager.enabled }}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "capi-ipam.certificate" . }}
{{- end }}
{{- end -}}

{{/* A webhook clientConfig pointing at our Service; the CA comes from cert-manager or from values. */}}
{{- define "capi-ipam.clientConfig" -}}
{{- $cc := dict "service" (dict "name" (include "capi-ipam.webhookService" .root) "namespace" .root.Release.Namespace "path" .path "port" 443) -}}
{{- if not .root.Values.webhook.certManager.enabled -}}
{{- $_ := set $cc "caBundle" (required "webhook.caBundle is required when webhook.certManager.enabled is false" .root.Values.webhook.caBundle) -}}
{{- else -}}
{{- /* cert-manager injects the CA after each write; when its Secret exists already (an upgrade, the second step of
docs/migration.md), the CA goes in the same write as our Service, so no call meets our certificate with another CA. */ -}}
{{- $secret := lookup "v1" "Secret" .root.Release.Namespace (include "capi-ipam.certSecret" .root) -}}
{{- $ca := dig "data" "ca.crt" "" ($secret | default dict) -}}
{{- if $ca -}}
{{- $_ := set $cc "caBundle" $ca -}}
{{- end -}}
{{- end -}}
{{- toYaml $cc -}}
{{- end -}}
