#!/usr/bin/env bash
# Renders the README's console screenshots (assets/screenshots/*.png) from a real
# `weir run` in tmux: files land in a directory while the flow ingests them, the
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

python3 - "$FONT" "$OUT" "$WORK/overview.ansi" "$WORK/detail.ansi" <<'PY'
import os, re, sys
from PIL import Image, ImageDraw, ImageFont

font_path, out_dir, *files = sys.argv[1:]
font = ImageFont.truetype(font_path, 15)
bold_path = font_path.replace("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf")
bold = ImageFont.truetype(bold_path, 15) if os.path.exists(bold_path) else font
CW, CH = 9, 19
BG, FG = (24, 26, 33), (214, 218, 224)
PALETTE = [(40, 42, 54), (224, 96, 96), (120, 200, 120), (230, 200, 100), (110, 150, 230), (200, 120, 210), (100, 200, 210), (200, 204, 210),
           (110, 114, 125), (255, 120, 120), (150, 230, 150), (255, 230, 130), (140, 180, 255), (230, 150, 240), (130, 230, 240), (255, 255, 255)]
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
# Light box-drawing glyphs as (up, down, left, right) strokes, drawn edge to edge so lines join.
BOX = {"│": (1, 1, 0, 0), "─": (0, 0, 1, 1), "┌": (0, 1, 0, 1), "┐": (0, 1, 1, 0), "└": (1, 0, 0, 1), "┘": (1, 0, 1, 0),
       "├": (1, 1, 0, 1), "┤": (1, 1, 1, 0), "┬": (0, 1, 1, 1), "┴": (1, 0, 1, 1), "┼": (1, 1, 1, 1)}

def color256(n):
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        return tuple(0 if v == 0 else 55 + 40 * v for v in (n // 36, (n // 6) % 6, n % 6))
    g = 8 + 10 * (n - 232)
    return (g, g, g)

def render(path, out):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")[:40]
    img = Image.new("RGB", (120 * CW + 16, 40 * CH + 16), BG)
    d = ImageDraw.Draw(img)
    for y, line in enumerate(lines):
        fg, bg, is_bold, rev = FG, None, False, False
        x, pos = 0, 0
        for m in list(SGR.finditer(line)) + [None]:
            text = line[pos:m.start()] if m else line[pos:]
            for ch in text:
                f, b = (bg or BG, fg) if rev else (fg, bg)
                px, py = 8 + x * CW, 8 + y * CH
                if b:
                    d.rectangle([px, py, px + CW - 1, py + CH - 1], fill=b)
                if ch in BOX:
                    up, down, left, right = BOX[ch]
                    cx, cy = px + CW // 2, py + CH // 2
                    if up: d.line([cx, py, cx, cy], fill=f)
                    if down: d.line([cx, cy, cx, py + CH - 1], fill=f)
                    if left: d.line([px, cy, cx, cy], fill=f)
                    if right: d.line([cx, cy, px + CW - 1, cy], fill=f)
                elif 0x2800 < ord(ch) <= 0x28FF:
                    # Braille: 2x4 dots, drawn (DejaVu Sans Mono has no braille glyphs).
                    bits = ord(ch) - 0x2800
                    for bit, (dx, dy) in enumerate([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3)]):
                        if bits & (1 << bit):
                            x0, y0 = px + 1 + dx * 4, py + 1 + dy * 4 + 1
                            d.rectangle([x0, y0, x0 + 2, y0 + 2], fill=f)
                elif ch != " ":
                    d.text((px, py), ch, font=bold if is_bold else font, fill=f)
                x += 1
            if not m:
                break
            pos = m.end()
            codes = [int(c) if c.isdigit() else 0 for c in re.split("[;:]", m.group(1) or "0")]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0: fg, bg, is_bold, rev = FG, None, False, False
                elif c == 1: is_bold = True
                elif c == 22: is_bold = False
                elif c == 7: rev = True
                elif c == 27: rev = False
                elif 30 <= c <= 37: fg = PALETTE[c - 30]
                elif 90 <= c <= 97: fg = PALETTE[c - 90 + 8]
                elif c == 39: fg = FG
                elif 40 <= c <= 47: bg = PALETTE[c - 40]
                elif 100 <= c <= 107: bg = PALETTE[c - 100 + 8]
                elif c == 49: bg = None
                elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                    if c == 38: fg = color256(codes[i + 2])
                    else: bg = color256(codes[i + 2])
                    i += 2
                i += 1
    img.save(out)
    print("wrote", out)

for f in files:
    render(f, os.path.join(out_dir, os.path.basename(f).replace(".ansi", ".png")))
PY
