#!/usr/bin/env bash
# What the tests need that a fresh machine lacks (run by .ci/run in the background while
# the test build runs; each step is idempotent and can be run by hand):
#   tmux                       the console tests of the real binary
#   PySpark + Delta jars       the Spark export and attach tests (scripts/spark-delta-setup.sh)
#   the Kafka broker's jars    the Kafka source's tests (scripts/kafka-jars.sh, docs/kafka.md)
#   SeaweedFS, Azurite         the object-storage tests (scripts/object-store-servers.sh)
#   PostgreSQL                 the postgres sink's tests, which start throwaway clusters
#                              (initdb in a temp dir, run as the postgres user; docs/sinks.md)
# A step that fails is reported and the others still run; the exit status is the
# number of failed steps.
cd "$(dirname "$0")/.."
failed=0
step() {
  local name="$1"
  shift
  local began
  began=$(date +%s)
  if "$@" >/dev/null 2>"/tmp/weir-setup-$name.err"; then
    echo "setup: $name done in $(( $(date +%s) - began )) s"
  else
    echo "warning: setup: $name failed; the tests that need it will fail:"
    tail -n 20 "/tmp/weir-setup-$name.err"
    failed=$((failed + 1))
  fi
}
install_tmux() {
  command -v tmux >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq tmux)
}
install_postgresql() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    || (apt-get update -qq && apt-get install -y -qq postgresql)
}
step tmux install_tmux
step postgresql install_postgresql
step spark-delta bash scripts/spark-delta-setup.sh
step kafka-jars bash scripts/kafka-jars.sh
step object-store-servers bash scripts/object-store-servers.sh
exit "$failed"
