# Sourced by .ci/run after scripts/spark-delta-setup.sh: what the Spark attach tests
# (tests/it/spark.rs, tests/it/spark_live.rs; docs/spark-attach.md) need.
#   - python3 for the inspect oracle (tests/spark/oracle.py; standard library only);
#   - the live test's PySpark: the venv spark-delta-setup.sh made (PySpark 4.2,
#     ~/.cache/weir-delta-venv) is reused, no second install; Java 17 comes with it.
# Exports WEIR_SPARK_PYTHON and WEIR_SPARK_ATTACH_TESTS=1 (the live test then fails,
# instead of skipping, when Spark is missing).
weir_spark_attach_setup() {
  local venv="${WEIR_DELTA_VENV:-$HOME/.cache/weir-delta-venv}"
  if ! command -v python3 >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq python3) >/dev/null 2>&1 \
      || echo "warning: could not install python3; the Spark inspect oracle test will fail"
  fi
  if ! "$venv/bin/python" -c 'import pyspark' >/dev/null 2>&1; then
    echo "warning: $venv has no PySpark (scripts/spark-delta-setup.sh); the live Spark attach test will fail"
  fi
  export WEIR_SPARK_PYTHON="$venv/bin/python"
  export WEIR_SPARK_ATTACH_TESTS=1
}
weir_spark_attach_setup
