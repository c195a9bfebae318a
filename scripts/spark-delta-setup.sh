#!/usr/bin/env bash
# Installs what the Spark export tests and benchmarks need (docs/spark.md):
#   - the Delta Lake jars from Maven Central (jars/delta/pom.xml) in ~/.cache/weir-jars/delta/
#   - a Python venv with PySpark 4.2.0, delta-spark 4.4.0 (the newest Delta on Maven Central,
#     built for Spark 4.2; no Delta supports Spark 4.3 yet), and deltalake + pyarrow, the
#     independent reader the tests compare tables with, in ~/.cache/weir-delta-venv/
# Idempotent; prints the venv path. Skips quietly (exit 0) without java or mvn, so that
# the rest of CI runs; the tests then report that Spark is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${WEIR_DELTA_VENV:-$HOME/.cache/weir-delta-venv}"
JARS="${WEIR_DELTA_JARS:-$HOME/.cache/weir-jars/delta}"
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless maven) >/dev/null 2>&1 \
    || { echo "spark-delta-setup: java/mvn not available; Spark export tests will be skipped" >&2; exit 0; }
fi
if [ ! -f "$JARS/.complete" ]; then
  mkdir -p "$JARS"
  mvn -q -B -f jars/delta/pom.xml dependency:copy-dependencies \
    -DoutputDirectory="$JARS" -DexcludeTransitive=true -DincludeScope=runtime >&2
  touch "$JARS/.complete"
fi
if [ ! -f "$VENV/.complete" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "pyspark==4.2.0" "delta-spark==4.4.0" "deltalake==1.6.6" "pyarrow" >&2
  touch "$VENV/.complete"
fi
echo "$VENV"
