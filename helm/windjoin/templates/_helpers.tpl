{{- define "windjoin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "windjoin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "windjoin.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "windjoin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: windjoin
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "windjoin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "windjoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component: (dict "ctx" $ "component" "proxy") */}}
{{- define "windjoin.componentLabels" -}}
{{ include "windjoin.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "windjoin.componentSelector" -}}
{{ include "windjoin.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "windjoin.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "windjoin.kafkaBootstrap" -}}
{{- if .Values.kafka.strimzi.enabled -}}
{{- printf "%s-kafka-kafka-bootstrap.%s.svc:9092" (include "windjoin.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "kafka.bootstrap is required (host:port of your Kafka brokers), or set kafka.strimzi.enabled=true" .Values.kafka.bootstrap -}}
{{- end -}}
{{- end -}}

{{- define "windjoin.redisUrl" -}}
{{- if .Values.redis.bundled -}}
{{- printf "redis://%s-redis.%s.svc:6379/0" (include "windjoin.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "redis.url is required when redis.bundled is false (redis://host:6379/0)" .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{- define "windjoin.dataClaim" -}}
{{- default (printf "%s-data" (include "windjoin.fullname" .)) .Values.storage.pvc.existingClaim -}}
{{- end -}}

{{- define "windjoin.checkpoint" -}}
{{- if eq .Values.storage.type "pvc" -}}/data/checkpoint{{- else -}}{{ required "storage.objectStore.checkpointUrl is required when storage.type is objectStore" .Values.storage.objectStore.checkpointUrl }}{{- end -}}
{{- end -}}

{{- define "windjoin.parquetPath" -}}
{{- if eq .Values.storage.type "pvc" -}}/data/results{{- else -}}{{ required "storage.objectStore.parquetUrl is required when storage.type is objectStore" .Values.storage.objectStore.parquetUrl }}{{- end -}}
{{- end -}}

{{/* The join spec with the chart's storage and Redis filled in. */}}
{{- define "windjoin.spec" -}}
{{- $spec := deepCopy .Values.spec -}}
{{- $sinks := default (dict) (get $spec "sinks") -}}
{{- $_ := set $sinks "parquet" (merge (dict "path" (include "windjoin.parquetPath" .)) (default (dict) (get $sinks "parquet"))) -}}
{{- $_ := set $sinks "redis" (merge (dict "url" (include "windjoin.redisUrl" .) "retain_ms" .Values.redis.retainMs) (default (dict) (get $sinks "redis"))) -}}
{{- $_ := set $spec "sinks" $sinks -}}
{{- $_ := set $spec "checkpoint" (include "windjoin.checkpoint" .) -}}
{{- toYaml $spec -}}
{{- end -}}

{{/* Volumes every windjoin pod mounts: the spec, scratch space, and the shared data volume. */}}
{{- define "windjoin.volumes" -}}
- name: spec
  configMap:
    name: {{ include "windjoin.fullname" . }}-spec
- name: tmp
  emptyDir: {}
{{- if eq .Values.storage.type "pvc" }}
- name: data
  persistentVolumeClaim:
    claimName: {{ include "windjoin.dataClaim" . }}
{{- end }}
{{- end -}}

{{- define "windjoin.volumeMounts" -}}
- name: spec
  mountPath: /etc/windjoin
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if eq .Values.storage.type "pvc" }}
- name: data
  mountPath: /data
{{- end }}
{{- end -}}

{{- define "windjoin.credentialsEnvFrom" -}}
{{- if and (eq .Values.storage.type "objectStore") .Values.storage.objectStore.credentialsSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.storage.objectStore.credentialsSecret }}
{{- end }}
{{- end -}}
