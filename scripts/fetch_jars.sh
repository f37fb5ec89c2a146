#!/usr/bin/env bash
# Java jars the project runs beside Python, fetched from Maven Central by Maven's own client as pinned in
# scripts/maven/<set>.pom.xml, each set into .tools/jars/<set>/ (the artifact and its runtime dependencies).
#   bash scripts/fetch_jars.sh [SET ...]     # default: every set; e.g. `kafka` (Apache Kafka's broker)
# Idempotent and offline once done: a set whose pom is unchanged since it was fetched (its sha256 in the set's
# .pom.sha256) is left alone, and Maven's local repository (~/.m2) keeps every artifact for a refetch.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
sets=("$@")
if [ ${#sets[@]} -eq 0 ]; then
  for pom in scripts/maven/*.pom.xml; do sets+=("$(basename "$pom" .pom.xml)"); done
fi
for set in "${sets[@]}"; do
  pom="scripts/maven/$set.pom.xml"
  [ -f "$pom" ] || { echo "fetch_jars: no jar set '$set' (accepted: $(ls scripts/maven | sed 's/.pom.xml//' | tr '\n' ' '))" >&2; exit 2; }
  out=".tools/jars/$set"
  want="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ -f "$out/.pom.sha256" ] && [ "$(cat "$out/.pom.sha256")" = "$want" ]; then
    continue
  fi
  command -v mvn >/dev/null 2>&1 || { echo "fetch_jars: Maven (mvn) is not on PATH; Debian: apt-get install maven" >&2; exit 1; }
  echo "fetching the '$set' jars from Maven Central ($pom)"
  staging="$out.partial"
  rm -rf "$staging"
  mkdir -p "$staging"
  log="$(mktemp)"
  if ! mvn -B -q -f "$pom" "$DEPENDENCY_PLUGIN:copy-dependencies" -DincludeScope=runtime \
       -DoutputDirectory="$PWD/$staging" >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "fetch_jars: Maven could not fetch the '$set' jars" >&2; exit 1
  fi
  rm -f "$log"
  echo "$want" > "$staging/.pom.sha256"
  rm -rf "$out"
  mv "$staging" "$out"
  echo "  $(ls "$out"/*.jar | wc -l) jars, $(du -sh "$out" | cut -f1), in $out"
done
