{{- define "kubenest.name" -}}kubenest{{- end -}}

{{- define "kubenest.operator" -}}{{ .Release.Name }}-operator{{- end -}}

{{- define "kubenest.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kubenest.labels" -}}
app.kubernetes.io/name: {{ include "kubenest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "kubenest.operatorSelector" -}}
app.kubernetes.io/name: {{ include "kubenest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kubenest.portalSelector" -}}
app.kubernetes.io/name: {{ include "kubenest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: portal
{{- end -}}
