{{/* The labels every ruleop object carries, and the Pods' selector. */}}
{{- define "ruleop.selector" -}}
app.kubernetes.io/name: ruleop
{{- end }}

{{/* A name made of a template directory: "team/app" -> "team-app" (scripts/generate.sh names the kustomize install's ConfigMaps the same way). */}}
{{- define "ruleop.dirName" -}}
{{- . | replace "/" "-" | replace "_" "-" | replace "." "-" -}}
{{- end }}

{{/* The rule files: file name -> text (values rules.files, or rules/ through the symlink files/rules). */}}
{{- define "ruleop.ruleFiles" -}}
{{- if .Values.rules.files }}
{{- toJson .Values.rules.files }}
{{- else }}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/rules/**" }}
{{- $_ := set $files (trimPrefix "files/rules/" $path) ($.Files.Get $path) }}
{{- end }}
{{- toJson $files }}
{{- end }}
{{- end }}

{{/* The templates: directory -> {file name -> text} (values rules.templates with rules.files, or templates/ through the symlink files/templates). */}}
{{- define "ruleop.templateDirs" -}}
{{- if .Values.rules.files }}
{{- toJson .Values.rules.templates }}
{{- else }}
{{- $dirs := dict }}
{{- range $path, $_ := .Files.Glob "files/templates/**" }}
{{- $dir := dir $path | trimPrefix "files/templates/" }}
{{- $files := get $dirs $dir | default dict }}
{{- $_ := set $files (base $path) ($.Files.Get $path) }}
{{- $_ := set $dirs $dir $files }}
{{- end }}
{{- toJson $dirs }}
{{- end }}
{{- end }}

{{/* What is mounted under /etc/ruleop/templates: directory -> ConfigMap name. */}}
{{- define "ruleop.templateMounts" -}}
{{- $mounts := dict }}
{{- if .Values.rules.existingConfigMap }}
{{- $mounts = .Values.rules.existingTemplateConfigMaps | default dict }}
{{- else }}
{{- range $dir, $_ := include "ruleop.templateDirs" . | fromJson }}
{{- $_ := set $mounts $dir (printf "ruleop-templates-%s" (include "ruleop.dirName" $dir)) }}
{{- end }}
{{- end }}
{{- toJson $mounts }}
{{- end }}
