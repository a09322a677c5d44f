{{/* The Bitnami common library's names, as far as this chart uses them. */}}
{{- define "etcd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "etcd.matchLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{- define "etcd.labels" -}}
{{ include "etcd.matchLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "etcd.secretName" -}}
{{- default (include "etcd.fullname" .) .Values.auth.rbac.existingSecret -}}
{{- end -}}

{{- define "etcd.secretPasswordKey" -}}
{{- default "etcd-root-password" .Values.auth.rbac.existingSecretPasswordKey -}}
{{- end -}}

{{- define "etcd.tokenSecretName" -}}
{{- default (printf "%s-jwt-token" (include "etcd.fullname" .)) .Values.auth.token.privateKey.existingSecret -}}
{{- end -}}

{{- define "etcd.clientScheme" -}}
{{- ternary "https" "http" (or .Values.auth.client.secureTransport .Values.auth.client.useAutoTLS) -}}
{{- end -}}

{{- define "etcd.peerScheme" -}}
{{- ternary "https" "http" .Values.auth.peer.secureTransport -}}
{{- end -}}

{{/* A value rendered as the Bitnami common.tplvalues.render does. */}}
{{- define "etcd.tplvalues" -}}
{{- if typeIs "string" .value }}{{ tpl .value .context }}{{ else }}{{ tpl (.value | toYaml) .context }}{{ end -}}
{{- end -}}

{{/* common.compatibility.renderSecurityContext: without `enabled`. */}}
{{- define "etcd.securityContext" -}}
{{- omit . "enabled" | toYaml -}}
{{- end -}}
