#!/usr/bin/env bash
# The Kafka benchmark's Spark side (benches/kafka.rs): Spark's Kafka source jars
# (jars/spark-kafka/pom.xml, Maven Central) into ~/.cache/weir-jars/spark-kafka, and the
# PySpark 4.2.0 + Delta venv of scripts/spark-delta-setup.sh. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST="$HOME/.cache/weir-jars/spark-kafka"
if ! ls "$DEST"/spark-sql-kafka-0-10_2.13-*.jar >/dev/null 2>&1; then
  mvn -q -B -f jars/spark-kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$DEST" >&2
fi
scripts/spark-delta-setup.sh >/dev/null
echo "$DEST"
