#!/usr/bin/env bash
# Entrypoint of the windjoin image. `executor`: a Spark executor started by the driver on Kubernetes (Spark gives
# executor pods the single argument "executor" and SPARK_* variables, as its own image's entrypoint expects);
# anything else runs as given (e.g. `windjoin run SPEC`, `windjoin proxy SPEC`).
set -euo pipefail

if [ "${1:-}" = "executor" ]; then
  shift
  classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:${SPARK_HOME}/jars/*:${SPARK_EXTRA_CLASSPATH:-}:$PWD"
  java_opts=()
  for var in $(compgen -v SPARK_JAVA_OPT_ | sort -t_ -k4 -n); do
    java_opts+=("${!var}")
  done
  exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "$classpath" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}" \
    "$@"
fi
exec "$@"
