#!/usr/bin/env bash
# weir vs its exported PySpark script on Spark + Delta, same machine, same input (issue #15):
#
#   1. the demo pipeline (assets/pipelines/flights.toml) on flights x10 with available_now:
#      weir's release build (`cargo bench --bench pipeline`, case `pipeline`, keeping its
#      directory), then the script of `weir export pyspark` on the same landed files and
#      dimensions, flow by flow (bench_export.py), its tables beside weir's;
#   2. the 3-hop latency case (latency.toml): weir (`cargo bench --bench pipeline`, case
#      `latency`), then the exported script as three concurrent queries in processing-time
#      mode (`--trigger "0 seconds"`, bench_export_latency.py).
#
# Usage: bench/spark/bench_export.sh WORK [RUNS]
#   WORK: a new directory (each run uses WORK/run-N); RUNS: how many times (default 3).
# Needs: flights x10 under $WEIR_BENCH_DIR/flights_x10 (default /var/tmp/weir-bench-inputs,
# made by `cargo bench --bench ingest` or bench/spark/gen_inputs.sh), Java 17, and
# scripts/spark-delta-setup.sh (PySpark 4.2 + Delta 4.4 + the deltalake reader).
# Prints the JSON lines of both engines; run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK="${1:?usage: bench_export.sh WORK [RUNS]}"
RUNS="${2:-3}"
VENV="$(scripts/spark-delta-setup.sh)"
PY="$VENV/bin/python"
mkdir -p "$WORK"
cargo build --release --locked --bin weir >&2
WEIR="${CARGO_TARGET_DIR:-target}/release/weir"
"$WEIR" export pyspark bench/spark/latency.toml -o "$WORK/latency.py"
for run in $(seq 1 "$RUNS"); do
  R="$WORK/run-$run"
  mkdir -p "$R"
  echo "# run $run: weir, demo pipeline" >&2
  WEIR_BENCH_CASES=pipeline WEIR_BENCH_WORK="$R/weir" cargo bench --locked --bench pipeline
  "$WEIR" export pyspark "$R/weir/pipeline.toml" -o "$R/flights.py"
  # Spark reads the very files weir read and writes its own tables and checkpoints.
  mkdir -p "$R/spark"
  ln -s "$R/weir/landing" "$R/spark/landing"
  ln -s "$R/weir/dims" "$R/spark/dims"
  echo "# run $run: spark+delta, demo pipeline" >&2
  "$PY" bench/spark/bench_export.py --script "$R/flights.py" -- --base "$R/spark"
  echo "# run $run: weir, latency" >&2
  WEIR_BENCH_CASES=latency cargo bench --locked --bench pipeline
  echo "# run $run: spark+delta, latency" >&2
  "$PY" bench/spark/bench_export_latency.py --script "$WORK/latency.py" --work "$R/latency"
done
