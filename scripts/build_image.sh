#!/usr/bin/env bash
# Build the windjoin image (Dockerfile) with podman on a machine without a container registry. Idempotent:
#   1. installs podman, runc, debootstrap (and prometheus, the stack test's scraper) with apt-get when missing;
#   2. writes .tools/containers.conf (runc, cgroupfs, file events, ulimits this kernel allows) that every podman
#      call of this project uses (export CONTAINERS_CONF=$PWD/.tools/containers.conf);
#   3. builds the base image localhost/debian:bookworm from Debian's packages (debootstrap + podman import) and
#      localhost/windjoin-base:bookworm on it (python3, venv, the host's CA certificates), each only when missing;
#   4. builds localhost/windjoin:$TAG from the Dockerfile FROM that base (layers cached by podman).
# With a registry, the plain `docker build -t windjoin:0.1.0 .` does the same from python:3.11-slim-bookworm.
# Env: TAG (default the chart's appVersion), MIRROR (default: the first Debian URI apt uses), REBUILD_BASE=1,
#   HADOOP_AWS_VERSION (e.g. 3.5.0: Hadoop's S3A jars in the image, fetched from MAVEN_REPOSITORY, default Maven
#   Central; see the Dockerfile's header; empty: the default image, without them).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/windjoin/Chart.yaml)}"
IMAGE="localhost/windjoin:$TAG"
DEBIAN_IMAGE="localhost/debian:bookworm"
BASE_IMAGE="localhost/windjoin-base:bookworm"
TOOLS="$PWD/.tools"
export CONTAINERS_CONF="$TOOLS/containers.conf"
started=$(date +%s)

need=()
for pair in podman:podman runc:runc debootstrap:debootstrap prometheus:prometheus; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    || { echo "build_image.sh needs ${need[*]} (Debian: apt-get install ${need[*]})" >&2; exit 1; }
  apt_log="$(mktemp)"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
              "${need[@]}" runc uidmap containernetworking-plugins; } >"$apt_log" 2>&1; then
    cat "$apt_log" >&2; echo "apt-get install ${need[*]} failed" >&2; exit 1
  fi
  rm -f "$apt_log"
fi

# crun (podman's default) refuses this kind of machine's hybrid cgroups; podman's default ulimits exceed what
# root may set in a container here.
mkdir -p "$TOOLS"
cat >"$CONTAINERS_CONF.tmp" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
mv "$CONTAINERS_CONF.tmp" "$CONTAINERS_CONF"

have() { podman image exists "$1"; }

if [ "${REBUILD_BASE:-0}" = 1 ] || ! have "$DEBIAN_IMAGE"; then
  mirror="${MIRROR:-$({ grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* || true; } \
    | grep -oE 'https?://[^ ]+' | grep -v security | head -1 || true)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$TOOLS/debootstrap.log" 2>&1 \
    || { tail -20 "$TOOLS/debootstrap.log" >&2; echo "debootstrap failed" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import --quiet - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  podman rmi --force "$BASE_IMAGE" >/dev/null 2>&1 || true
fi

if ! have "$BASE_IMAGE"; then
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' EXIT
  # pip and apt inside the builds trust what the host trusts (a TLS-intercepting proxy's CA, if any).
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca.crt"
  cat >"$ctx/Containerfile" <<EOF
FROM $DEBIAN_IMAGE
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \\
    && rm -rf /var/lib/apt/lists/*
COPY host-ca.crt /usr/local/share/ca-certificates/host-ca.crt
RUN update-ca-certificates >/dev/null
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
EOF
  podman build --quiet --network host -t "$BASE_IMAGE" "$ctx" >/dev/null
  rm -rf "$ctx"
  trap - EXIT
fi

s3a_args=()
if [ -n "${HADOOP_AWS_VERSION:-}" ]; then
  s3a_args+=(--build-arg "HADOOP_AWS_VERSION=$HADOOP_AWS_VERSION")
  [ -z "${MAVEN_REPOSITORY:-}" ] || s3a_args+=(--build-arg "MAVEN_REPOSITORY=$MAVEN_REPOSITORY")
fi
podman build --network host --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg PYTHON=python3 ${s3a_args[@]+"${s3a_args[@]}"} \
  -t "$IMAGE" . \
  >"$TOOLS/build_image.log" 2>&1 \
  || { tail -30 "$TOOLS/build_image.log" >&2; echo "podman build failed (log: $TOOLS/build_image.log)" >&2; exit 1; }
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "$IMAGE built in $(($(date +%s) - started)) s, $((size / 1000000)) MB"
