{{/* The pod template Spark applies to every executor pod it creates (spark.kubernetes.executor.podTemplateFile). */}}
{{- define "windjoin.executorPodTemplate" -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    {{- include "windjoin.componentLabels" (dict "ctx" $ "component" "executor") | nindent 4 }}
spec:
  serviceAccountName: {{ include "windjoin.fullname" . }}-executor
  automountServiceAccountToken: false
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.join.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.join.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: spark-executor
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      env:
        - name: PYSPARK_PYTHON
          value: /opt/windjoin/venv/bin/python
        {{- include "windjoin.env" (dict "ctx" . "component" "job") | nindent 8 }}
        {{- with include "windjoin.objectStoreEnv" $ | trim }}{{ . | nindent 8 }}{{ end }}
      {{- include "windjoin.credentialsEnvFrom" . | nindent 6 }}
      volumeMounts:
        {{- include "windjoin.volumeMounts" . | nindent 8 }}
        {{- include "windjoin.credentialMounts" (dict "ctx" . "kafka" true "registry" true "spark" true "objectStore" true) | nindent 8 }}
  volumes:
    {{- include "windjoin.volumes" . | nindent 4 }}
    {{- include "windjoin.credentialVolumes" (dict "ctx" . "component" "job" "kafka" true "registry" true "spark" true "objectStore" true) | nindent 4 }}
{{- end -}}
