#!/usr/bin/env bash
# Fetches the Kafka broker that the tests and benchmarks start (jars/kafka/pom.xml:
# org.apache.kafka:kafka_2.13 and its dependencies, from Maven Central) into
# ~/.cache/weir-jars/kafka (WEIR_KAFKA_JARS overrides). Idempotent: does nothing
# when the jars of this pom are already there. Prints the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${WEIR_KAFKA_JARS:-$HOME/.cache/weir-jars/kafka}"
POM=jars/kafka/pom.xml
STAMP="$(sha256sum "$POM" | cut -d' ' -f1)"
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$STAMP" ]; then
  echo "$DEST"
  exit 0
fi
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless maven) >/dev/null 2>&1 \
    || { echo "kafka-jars: java and mvn are needed (apt-get install openjdk-17-jre-headless maven)" >&2; exit 1; }
fi
TMP="$DEST.tmp.$$"
rm -rf "$TMP"
mkdir -p "$TMP"
mvn -q -B -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$TMP" >&2
echo "$STAMP" > "$TMP/.complete"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$TMP" "$DEST"
echo "$DEST"
