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
.venv/bin/python -m pip install --quiet -e '.[dev]'
echo "windjoin is set up: .venv/bin/windjoin --help"
