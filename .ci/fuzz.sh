#!/usr/bin/env bash
# Every fuzz target for a bounded time on the committed corpus (issue #18,
# docs/reliability.md#fuzzing). A crash fails the run; libFuzzer leaves the input in
# fuzz/artifacts/TARGET/, which then becomes a corpus file and a regression test.
# New inputs a run finds go to a scratch directory, so the committed corpus is unchanged.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${WEIR_FUZZ_SECONDS:-30}"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "warning: no nightly Rust toolchain; the fuzz targets did not run (cargo test still replays their corpus)"
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz@0.13.2
fi
# A target dir of its own (sanitizer-coverage flags differ from the test build's), kept
# between runs like the test build's.
target_dir="${WEIR_FUZZ_TARGET_DIR:-/var/tmp/weir-fuzz-target}"
fuzz=(cargo +nightly fuzz)
opts=(-s none --codegen-units 16 --target-dir "$target_dir")
"${fuzz[@]}" build "${opts[@]}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in $("${fuzz[@]}" list); do
  mkdir -p "$scratch/$target"
  echo "fuzz $target: ${secs} s on corpus/$target ($(ls "corpus/$target" | wc -l) inputs)"
  status=0
  "${fuzz[@]}" run "${opts[@]}" "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 \
    >"$scratch/$target.log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$scratch/$target.log" || true
  # An input slower than -timeout is not a crash. One class is known and upstream
  # (docs/reliability.md#known-slow-inputs): reported, not failed. libFuzzer exits 70 on a
  # timeout but cargo-fuzz turns every failure of the target into its own exit 1, so the
  # timeout is recognised by libFuzzer's own line in the log, not by the exit status.
  if [ "$status" -ne 0 ] && grep -q 'ERROR: libFuzzer: timeout' "$scratch/$target.log"; then
    grep -E 'Test unit written|timeout after' "$scratch/$target.log" || true
    echo "warning: fuzz $target found an input slower than 60 s (a timeout, not a crash); see docs/reliability.md#known-slow-inputs"
    continue
  fi
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$scratch/$target.log"
    echo "fuzz $target failed (exit $status); the input is in fuzz/artifacts/$target/"
    exit "$status"
  fi
done
