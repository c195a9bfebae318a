#!/usr/bin/env bash
# What docs/reliability.md's tests need on a fresh machine: strace (the syscall-order
# test, tests/it/power.rs) and a C compiler (the power-cut shim, tests/powercut/).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if ((${#missing[@]})); then
  (apt-get update -qq && apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
    || echo "warning: could not install ${missing[*]} (tests/it/power.rs needs them)"
fi
