{{/* Names: "<release>-sundial", or the release name when it has "sundial". */}}
{{- define "sundial.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sundial.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selects one component's pods: dict "top" $ "component" "gateway"|"pumpd". */}}
{{- define "sundial.selector" -}}
app.kubernetes.io/name: {{ .top.Chart.Name }}
app.kubernetes.io/instance: {{ .top.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sundial.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "sundial.adminSecret" -}}
{{- .Values.admin.existingSecret | default (printf "%s-admin" (include "sundial.fullname" .)) -}}
{{- end -}}

{{/* A value {secret: NAME, key: KEY}: a Secret's key, mounted as a file. */}}
{{- define "sundial.isSecretRef" -}}
{{- if and (kindIs "map" .) (eq (len .) 2) (hasKey . "secret") (hasKey . "key") -}}true{{- end -}}
{{- end -}}

{{/* The names of the Secrets that values refer to, one per line. */}}
{{- define "sundial.secretNames" -}}
{{- if include "sundial.isSecretRef" . }}
{{ .secret }}
{{- else if kindIs "map" . }}
{{- range $k, $v := . }}{{ include "sundial.secretNames" $v }}{{ end }}
{{- else if kindIs "slice" . }}
{{- range . }}{{ include "sundial.secretNames" . }}{{ end }}
{{- end -}}
{{- end -}}

{{/* Volumes and mounts shared by gateways and pumpd. */}}
{{- define "sundial.volumes" -}}
- name: config
  configMap: {name: {{ include "sundial.fullname" . }}}
- name: accounts
  secret:
    secretName: {{ include "sundial.adminSecret" . }}
    items: [{key: accounts.toml, path: accounts.toml}]
{{- range $i, $name := include "sundial.secretNames" (dict "pools" .Values.pools "config" .Values.config) | splitList "\n" | compact | uniq | sortAlpha }}
- name: secret-{{ $i }}
  secret: {secretName: {{ $name }}}
{{- end }}
{{- end -}}

{{- define "sundial.volumeMounts" -}}
# A directory, not a subPath: an edit of the ConfigMap reaches the pods
# as a file change, and Sundial reloads its pools (watch_config).
- {name: config, mountPath: /etc/sundial/config, readOnly: true}
- {name: accounts, mountPath: /etc/sundial/accounts, readOnly: true}
{{- range $i, $name := include "sundial.secretNames" (dict "pools" .Values.pools "config" .Values.config) | splitList "\n" | compact | uniq | sortAlpha }}
- {name: secret-{{ $i }}, mountPath: /etc/sundial/secrets/{{ $name }}, readOnly: true}
{{- end }}
{{- end -}}

{{- define "sundial.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "sundial.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* dict "top" $ "component" "gateway"|"pumpd" */}}
{{- define "sundial.topologySpread" -}}
{{- if .top.Values.topologySpread.constraints }}
{{- toYaml .top.Values.topologySpread.constraints }}
{{- else -}}
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "sundial.selector" . | nindent 6 }}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "sundial.selector" . | nindent 6 }}
{{- end }}
{{- end -}}
