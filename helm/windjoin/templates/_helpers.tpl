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
{{- $_ := set $sinks "redis" (merge (dict "url" (include "windjoin.redisUrl" .) "retain_ms" .Values.redis.retainMs "max_bytes" .Values.redis.maxBytes) (default (dict) (get $sinks "redis"))) -}}
{{- $_ := set $spec "sinks" $sinks -}}
{{- $_ := set $spec "checkpoint" (include "windjoin.checkpoint" .) -}}
{{- $_ := set $spec "kafka" (fromYaml (include "windjoin.kafkaSection" .)) -}}
{{- if .Values.kafka.schemaRegistry.url -}}
{{- $_ := set $spec "schema_registry" (fromYaml (include "windjoin.registrySection" .)) -}}
{{- end -}}
{{- toYaml $spec -}}
{{- end -}}

{{/* The spec's `schema_registry:` section from kafka.schemaRegistry (paths of the mounted Secrets, never their content). */}}
{{- define "windjoin.registrySection" -}}
{{- $r := .Values.kafka.schemaRegistry -}}
{{- $out := dict "url" $r.url -}}
{{- if $r.username -}}
{{- $_ := set $out "username" $r.username -}}
{{- $_ := set $out "password_file" "/var/run/secrets/windjoin/schema-registry/password" -}}
{{- end -}}
{{- if $r.caSecret -}}
{{- $_ := set $out "ca_file" "/var/run/secrets/windjoin/schema-registry-ca/ca.crt" -}}
{{- end -}}
{{- toYaml $out -}}
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

{{/* The object store's credentials as environment variables (storage.objectStore.credentialsSecret), for the pods
     that read or write it: the job's driver and executors, the proxy. */}}
{{- define "windjoin.credentialsEnvFrom" -}}
{{- if and (eq .Values.storage.type "objectStore") .Values.storage.objectStore.credentialsSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.storage.objectStore.credentialsSecret }}
{{- end }}
{{- end -}}

{{/* Where the object store's clients (pyarrow for the Parquet results, the AWS SDK under Hadoop's s3a:// for the
     checkpoint) find what is not a secret: the mounted shared-credentials file's path, an S3-compatible
     endpoint, the region. The same pods as windjoin.credentialsEnvFrom. */}}
{{- define "windjoin.objectStoreEnv" -}}
{{- $o := .Values.storage.objectStore -}}
{{- if eq .Values.storage.type "objectStore" }}
{{- if and $o.credentialsSecret $o.credentialsFile.secret }}
{{- fail "storage.objectStore.credentialsSecret and storage.objectStore.credentialsFile.secret: give one (environment variables or a shared-credentials file), not both (the variables would silently win over the file)" }}
{{- end }}
{{- if $o.credentialsFile.secret }}
- name: AWS_SHARED_CREDENTIALS_FILE
  value: /var/run/secrets/windjoin/object-store/credentials
{{- end }}
{{- with $o.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with $o.region }}
- name: AWS_REGION
  value: {{ . | quote }}
- name: AWS_DEFAULT_REGION  # the name the AWS CLI and some SDKs read
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Secret names: the user's existing one, else the one the chart creates. */}}
{{/* The Secret (key `password`) of one Redis user: job, controller, proxy or admin. (dict "ctx" $ "user" "job") */}}
{{- define "windjoin.redisSecret" -}}
{{- default (printf "%s-redis-%s" (include "windjoin.fullname" .ctx) .user) (index .ctx.Values.redis.auth.existingSecrets .user) -}}
{{- end -}}
{{- define "windjoin.sparkAuthSecret" -}}
{{- default (printf "%s-spark-auth" (include "windjoin.fullname" .)) .Values.join.authenticate.existingSecret -}}
{{- end -}}
{{- define "windjoin.proxyTokensSecret" -}}
{{- default (printf "%s-proxy-tokens" (include "windjoin.fullname" .)) .Values.proxy.auth.existingSecret -}}
{{- end -}}
{{- define "windjoin.proxyCursorKeySecret" -}}
{{- default (printf "%s-proxy-cursor-key" (include "windjoin.fullname" .)) .Values.proxy.cursorKey.existingSecret -}}
{{- end -}}

{{/* A random secret kept across upgrades: the value already in the cluster's Secret, else a new one of `length`
     letters and digits (default 40). (dict "ctx" $ "name" secretName "key" key ["length" n]) */}}
{{- define "windjoin.keptRandom" -}}
{{- $found := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $found (hasKey $found.data .key) -}}
{{- index $found.data .key -}}
{{- else -}}
{{- randAlphaNum (default 40 .length | int) | b64enc -}}
{{- end -}}
{{- end -}}

{{/* The ACL rules of one Redis user (job, controller, proxy, admin): the same as
     windjoin.operators.redis_acl.component_rules (tests/deploy checks they agree). (dict "ctx" $ "component" "job") */}}
{{- define "windjoin.redisAclRules" -}}
{{- $ns := .ctx.Values.redis.auth.namespace -}}
{{- if eq .component "job" -}}
~{{ $ns }}:{*}:index ~{{ $ns }}:{*}:meta ~{{ $ns }}:{*}:feed ~{{ $ns }}:{*}:piece:* ~{{ $ns }}:{*}:pieces ~{{ $ns }}:{*}:staged ~{{ $ns }}:{*}:owner %W~{{ $ns }}:{control}:load %R~{{ $ns }}:{control}:decision -@all +hello +auth +ping +hgetall +smembers +del +type +get +hget +hmget +hstrlen +exists +zrank +zcount +zrange +xrange +xinfo|stream +time +hset +hdel +hincrby +unlink +srem +sadd +zadd +zrem +xadd +fcall +fcall_ro +multi +exec +discard
{{- else if eq .component "controller" -}}
%R~{{ $ns }}:{control}:load ~{{ $ns }}:{control}:decision ~{{ $ns }}:{control}:decisions -@all +hello +auth +ping +xrange +xrevrange +hgetall +del +hset +xadd +multi +exec +discard
{{- else if eq .component "proxy" -}}
%R~{{ $ns }}:{*}:index %R~{{ $ns }}:{*}:meta %R~{{ $ns }}:{*}:feed %R~{{ $ns }}:{*}:piece:* -@all +hello +auth +ping +xread +hget +hmget +hstrlen +exists +zrank +zcount +zrange +xrange +xinfo|stream +time +fcall_ro
{{- else -}}
-@all +hello +auth +ping +function|load +function|list +function|kill +script|kill
{{- end -}}
{{- end -}}

{{/* Environment of a windjoin container: its Redis user (password from the mounted Secret), HOME on /tmp
     (the root file system is read-only). (dict "ctx" $ "component" "job") */}}
{{- define "windjoin.env" -}}
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: WINDJOIN_REDIS_USERNAME
  value: windjoin-{{ .component }}
- name: WINDJOIN_REDIS_PASSWORD_FILE
  value: /var/run/secrets/windjoin/redis/{{ .component }}
{{- if .ctx.Values.redis.tls.caSecret }}
- name: WINDJOIN_REDIS_CA_FILE
  value: /var/run/secrets/windjoin/redis-ca/ca.crt
{{- end }}
{{- end -}}

{{/* Credential volumes of one component: its own Redis user's Secret only (another's would let it act as that
     component), Kafka's, the schema registry's, Spark's and the object store's shared-credentials file where it
     needs them. (dict "ctx" $ "component" "job" "kafka" true "registry" true "spark" true "objectStore" true) */}}
{{- define "windjoin.credentialVolumes" -}}
- name: redis-auth
  secret:
    secretName: {{ include "windjoin.redisSecret" (dict "ctx" .ctx "user" .component) }}
    defaultMode: 0440
    items:
      - key: password
        path: {{ .component }}
{{- if .ctx.Values.redis.tls.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .ctx.Values.redis.tls.caSecret }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- if .kafka }}
{{- with .ctx.Values.kafka.security.passwordSecret }}
- name: kafka-auth
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items: [{key: password, path: password}]
{{- end }}
{{- with .ctx.Values.kafka.security.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- end }}
{{- if .registry }}
{{- with .ctx.Values.kafka.schemaRegistry.passwordSecret }}
- name: schema-registry-auth
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items: [{key: password, path: password}]
{{- end }}
{{- with .ctx.Values.kafka.schemaRegistry.caSecret }}
- name: schema-registry-ca
  secret:
    secretName: {{ . }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- end }}
{{- if .spark }}
- name: spark-auth
  secret:
    secretName: {{ include "windjoin.sparkAuthSecret" .ctx }}
    defaultMode: 0440
    items: [{key: secret, path: secret}]
{{- end }}
{{- if and .objectStore (eq .ctx.Values.storage.type "objectStore") .ctx.Values.storage.objectStore.credentialsFile.secret }}
- name: object-store-credentials
  secret:
    secretName: {{ .ctx.Values.storage.objectStore.credentialsFile.secret }}
    defaultMode: 0440
    items: [{key: {{ .ctx.Values.storage.objectStore.credentialsFile.key | quote }}, path: credentials}]
{{- end }}
{{- end -}}

{{- define "windjoin.credentialMounts" -}}
- name: redis-auth
  mountPath: /var/run/secrets/windjoin/redis
  readOnly: true
{{- if .ctx.Values.redis.tls.caSecret }}
- name: redis-ca
  mountPath: /var/run/secrets/windjoin/redis-ca
  readOnly: true
{{- end }}
{{- if .kafka }}
{{- if .ctx.Values.kafka.security.passwordSecret }}
- name: kafka-auth
  mountPath: /var/run/secrets/windjoin/kafka
  readOnly: true
{{- end }}
{{- if .ctx.Values.kafka.security.caSecret }}
- name: kafka-ca
  mountPath: /var/run/secrets/windjoin/kafka-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if .registry }}
{{- if .ctx.Values.kafka.schemaRegistry.passwordSecret }}
- name: schema-registry-auth
  mountPath: /var/run/secrets/windjoin/schema-registry
  readOnly: true
{{- end }}
{{- if .ctx.Values.kafka.schemaRegistry.caSecret }}
- name: schema-registry-ca
  mountPath: /var/run/secrets/windjoin/schema-registry-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if .spark }}
- name: spark-auth
  mountPath: /var/run/secrets/windjoin/spark
  readOnly: true
{{- end }}
{{- if and .objectStore (eq .ctx.Values.storage.type "objectStore") .ctx.Values.storage.objectStore.credentialsFile.secret }}
- name: object-store-credentials
  mountPath: /var/run/secrets/windjoin/object-store
  readOnly: true
{{- end }}
{{- end -}}

{{/* The spec's `kafka:` section from kafka.security (paths of the mounted Secrets, never their content). */}}
{{- define "windjoin.kafkaSection" -}}
{{- $s := .Values.kafka.security -}}
{{- $out := dict "security_protocol" $s.protocol -}}
{{- if hasPrefix "SASL_" $s.protocol -}}
{{- $_ := set $out "sasl_mechanism" $s.saslMechanism -}}
{{- $_ := set $out "username" $s.username -}}
{{- $_ := set $out "password_file" "/var/run/secrets/windjoin/kafka/password" -}}
{{- end -}}
{{- if and $s.caSecret (hasSuffix "SSL" $s.protocol) -}}
{{- $_ := set $out "ca_file" "/var/run/secrets/windjoin/kafka-ca/ca.crt" -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
