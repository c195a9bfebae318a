#!/usr/bin/env bash
# Renders the README's console screenshots (assets/screenshots/*.png) from a real
# `weir run` and a real `weir demo` in tmux: files land in a directory while the flow ingests them, the
# screen is captured with its colours (tmux capture-pane -e) and drawn to PNG by a
# small Pillow renderer (below) with DejaVu Sans Mono.
#
#   scripts/screenshots.sh            # builds weir (debug) if needed
#   WEIR=/path/to/weir scripts/screenshots.sh
#
# Needs: tmux, python3 with Pillow (installed from PyPI if missing), fonts-dejavu-core.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/assets/screenshots
TARGET=${CARGO_TARGET_DIR:-/var/tmp/weir-target}
WEIR=${WEIR:-$TARGET/debug/weir}
[ -x "$WEIR" ] || cargo build --bin weir
command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }
python3 -c 'import PIL' 2>/dev/null || python3 -m pip install --quiet pillow
FONT=${FONT:-/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf}
[ -f "$FONT" ] || { apt-get update -qq && apt-get install -y -qq fonts-dejavu-core; }

WORK=$(mktemp -d /tmp/weir-shots-XXXXXX)
SOCK=weir-shots-$$
trap 'tmux -L $SOCK kill-server 2>/dev/null || true; kill $LANDER 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/landing/events" "$WORK/landing/orders"
cat > "$WORK/pipeline.toml" <<'TOML'
[[flow]]
name = "bronze_events"
trigger = "2 seconds"
select = ["*", "_metadata.file_path AS source_file"]

[flow.source]
type = "files"
path = "landing/events"
format = "json"
max_files_per_trigger = 4

[flow.sink]
type = "delta"
path = "lake/bronze/events"

[[flow]]
name = "bronze_orders"
trigger = "5 seconds"

[flow.source]
type = "files"
path = "landing/orders"
format = "csv"

[flow.sink]
type = "delta"
path = "lake/bronze/orders"
TOML

# One JSON file of 800-2400 rows, written in staging and renamed in (files land atomically).
land_one() {
  python3 - "$WORK/staging/part-$(printf %05d "$1").json" "$1" <<'PY'
import json, random, sys
random.seed(int(sys.argv[2]))
with open(sys.argv[1], "w") as f:
    for i in range(random.randint(800, 2400)):
        f.write(json.dumps({"id": i, "user": random.randint(1, 500), "kind": random.choice(["view", "click", "buy"])}) + "\n")
PY
  mv "$WORK/staging/part-$(printf %05d "$1").json" "$WORK/landing/events/"
  if [ $(($1 % 3)) -eq 0 ]; then
    printf 'order_id,qty,price\n%s,2,9.99\n%s,1,4.50\n' "$1" "$(($1 + 1))" > "$WORK/staging/o-$1.csv"
    mv "$WORK/staging/o-$1.csv" "$WORK/landing/orders/"
  fi
}
mkdir -p "$WORK/staging"
# A burst before the run (a backlog to drain), then a steady trickle while it runs.
for n in $(seq 1 60); do land_one "$n"; done
( n=60; while true; do n=$((n + 1)); land_one "$n"; sleep 0.7; done ) &
LANDER=$!

tmux -L $SOCK -f /dev/null new-session -d -s shots -x 120 -y 40 -c "$WORK" \
  -e LANG=C.UTF-8 -e TERM=xterm-256color "$WEIR" run pipeline.toml
sleep 45
# A one-minute window: the run is young.
tmux -L $SOCK send-keys -t shots +
sleep 1
tmux -L $SOCK capture-pane -e -p -t shots > "$WORK/overview.ansi"
tmux -L $SOCK send-keys -t shots Enter
sleep 3
tmux -L $SOCK capture-pane -e -p -t shots > "$WORK/detail.ansi"
tmux -L $SOCK send-keys -t shots q
sleep 3

# The demo: the full nycflights13 pipeline over a live replay.
tmux -L $SOCK -f /dev/null new-session -d -s demo -x 120 -y 40 -c "$WORK" \
  -e LANG=C.UTF-8 -e TERM=xterm-256color "$WEIR" demo --dir "$WORK/demo" --speed 7200
sleep 40
tmux -L $SOCK capture-pane -e -p -t demo > "$WORK/demo-overview.ansi"
tmux -L $SOCK send-keys -t demo : "flow gold_departures_hourly" Enter
sleep 3
tmux -L $SOCK capture-pane -e -p -t demo > "$WORK/demo-detail.ansi"
tmux -L $SOCK send-keys -t demo q
sleep 3

python3 scripts/render_ansi.py "$FONT" "$OUT" "$WORK/overview.ansi" "$WORK/detail.ansi" \
  "$WORK/demo-overview.ansi" "$WORK/demo-detail.ansi"
