#!/usr/bin/env bash
# Write the benchmark inputs into DIR: flights_x10/ (CSV) and events/ (JSON lines).
set -euo pipefail
DIR="${1:?usage: gen_inputs.sh DIR}"
HERE="$(cd "$(dirname "$0")" && pwd)"
# The repo ships the real flights as assets/data/nycflights13/flights.csv.gz; NYCFLIGHTS_DIR overrides.
DATA="${NYCFLIGHTS_DIR:-$HERE/../../assets/data/nycflights13}"
python3 "$HERE/gen_flights_x10.py" --data "$DATA" --out "$DIR/flights_x10"
python3 "$HERE/gen_events.py" --out "$DIR/events"
