"""Draws tmux captures (capture-pane -e) to PNG: python3 render_ansi.py FONT OUT_DIR FILE.ansi..."""
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
