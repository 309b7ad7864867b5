{{/*
sundial.toml from values: a small TOML writer. A table's plain keys come
first, then its sub-tables; lists of tables are arrays of inline tables,
one per line; {secret: NAME, key: KEY} becomes { file = "…" }.
*/}}

{{- define "sundial.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{- define "sundial.toml.value" -}}
{{- if include "sundial.isSecretRef" . -}}
{ file = {{ printf "/etc/sundial/secrets/%s/%s" .secret .key | toJson }} }
{{- else if kindIs "map" . -}}
{{- $m := . -}}
{ {{ range $i, $k := keys $m | sortAlpha }}{{ if $i }}, {{ end }}{{ include "sundial.toml.key" $k }} = {{ include "sundial.toml.value" (index $m $k) }}{{ end }} }
{{- else if kindIs "slice" . -}}
{{- if and . (kindIs "map" (first .)) -}}
[
{{- range . }}
  {{ include "sundial.toml.value" . }},
{{- end }}
]
{{- else -}}
[{{ range $i, $e := . }}{{ if $i }}, {{ end }}{{ include "sundial.toml.value" $e }}{{ end }}]
{{- end -}}
{{- else if kindIs "string" . -}}
{{ toJson . }}
{{- else if kindIs "float64" . -}}
{{- if ne (float64 (int64 .)) . }}{{ fail (printf "config: %v is not a whole number (every number in sundial.toml is)" .) }}{{ end -}}
{{ int64 . }}
{{- else -}}
{{ . }}
{{- end -}}
{{- end -}}

{{/* dict "path" "pools.default" "table" $map */}}
{{- define "sundial.toml.table" -}}
{{- $t := .table -}}
{{- range $k := keys $t | sortAlpha }}
{{- $v := index $t $k }}
{{- if or (not (kindIs "map" $v)) (include "sundial.isSecretRef" $v) }}
{{ include "sundial.toml.key" $k }} = {{ include "sundial.toml.value" $v }}
{{- end }}
{{- end }}
{{- range $k := keys $t | sortAlpha }}
{{- $v := index $t $k }}
{{- if and (kindIs "map" $v) (not (include "sundial.isSecretRef" $v)) }}
{{- $path := ternary (include "sundial.toml.key" $k) (printf "%s.%s" $.path (include "sundial.toml.key" $k)) (eq $.path "") }}
{{- if or (not $v) (include "sundial.toml.hasPlain" $v) }}

[{{ $path }}]
{{- end }}
{{- include "sundial.toml.table" (dict "path" $path "table" $v) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* "true" when a table has a key that is not a sub-table. */}}
{{- define "sundial.toml.hasPlain" -}}
{{- range $k, $v := . }}{{ if or (not (kindIs "map" $v)) (include "sundial.isSecretRef" $v) }}true{{ end }}{{ end -}}
{{- end -}}
