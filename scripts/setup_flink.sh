#!/usr/bin/env bash
# The Flink peer of benchmarks/flink_peer.py: PyFlink (apache-flink, pinned) in its own virtualenv .venv-flink.
# Its own venv because apache-flink pins pyarrow/pandas/numpy versions that clash with windjoin's .venv.
# Needs Java 11+ on PATH (the local mini-cluster runs in a JVM). Idempotent: does nothing when it already imports.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
FLINK_VERSION="2.3.0"
VENV=.venv-flink
if [ -x "$VENV/bin/python" ] \
   && "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('apache-flink') != '$FLINK_VERSION')" \
      >/dev/null 2>&1; then
  exit 0
fi
command -v java >/dev/null 2>&1 || echo "warning: java is not on PATH; PyFlink's mini-cluster needs Java 11+" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "apache-flink==$FLINK_VERSION"
echo "PyFlink $FLINK_VERSION is set up in $VENV"
