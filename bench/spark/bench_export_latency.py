"""Multi-hop latency on Spark + Delta: the 3-hop pipeline of `cargo bench --bench pipeline`
(latency case; bench/spark/latency.toml), exported by `weir export pyspark` and run as three
concurrent streaming queries with the default trigger (as soon as possible: weir's
`processing_time = "0 seconds"`).

JSON files of one row land in WORK/landing (written aside, then renamed in) at RATE files/s;
a poller reads gold's Delta log (Python `deltalake`) every 5 ms and records when each row
becomes visible there. Latency = visible in gold - landed. Before the measured files, one
warm-up file must go through the three hops (the JVM start and the queries' first batches
are not measured; weir's figure includes its start, which is milliseconds).

Usage:
  python bench_export_latency.py --script LATENCY.py --work DIR [--files 1000] [--rate 20] [--jars DIR]
Prints one JSON line.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
from deltalake import DeltaTable

ap = argparse.ArgumentParser()
ap.add_argument("--script", required=True)
ap.add_argument("--work", required=True)
ap.add_argument("--files", type=int, default=1000)
ap.add_argument("--rate", type=float, default=20.0)
ap.add_argument("--jars", default=os.path.expanduser("~/.cache/weir-jars/delta"))
ap.add_argument("--warmup-timeout", type=float, default=600.0)
a = ap.parse_args()

now_ms = lambda: int(time.time() * 1000)
landing = os.path.join(a.work, "landing")
staging = os.path.join(a.work, "_staging")
gold = os.path.join(a.work, "lake/gold")
os.makedirs(landing, exist_ok=True)
os.makedirs(staging, exist_ok=True)


# The warm-up row must pass silver's filter (`id >= 0`), so it has an id after every
# measured one; its file sorts first by name.
WARMUP = 10 ** 9


def land(i):
    name = "e%07d.json" % (0 if i == WARMUP else i + 1)
    tmp = os.path.join(staging, name)
    with open(tmp, "w") as f:
        f.write('{"id":%d,"landed_ms":%d,"payload":"x"}\n' % (i, now_ms()))
    os.rename(tmp, os.path.join(landing, name))


visible = {}
done = threading.Event()


def poll():
    seen_files = set()
    version = -1
    log = os.path.join(gold, "_delta_log")
    dt = None
    while not done.is_set():
        time.sleep(0.005)
        try:
            n = sum(1 for x in os.listdir(log) if x.endswith(".json"))
        except FileNotFoundError:
            continue
        if n - 1 == version:
            continue
        try:
            if dt is None:
                dt = DeltaTable(gold)
            else:
                dt.update_incremental()
        except Exception:
            continue
        version = dt.version()
        at = now_ms()
        for uri in dt.file_uris():
            if uri in seen_files:
                continue
            seen_files.add(uri)
            path = uri[len("file://"):] if uri.startswith("file://") else uri
            t = pq.read_table(path, columns=["id", "landed_ms"])
            for i, landed in zip(t.column("id").to_pylist(), t.column("landed_ms").to_pylist()):
                if i is not None:
                    visible.setdefault(i, at - landed)


jars = sorted(glob.glob(os.path.join(a.jars, "*.jar")))
env = dict(os.environ)
env.setdefault("PYSPARK_SUBMIT_ARGS",
               "--master local[2] --driver-memory 2g --conf spark.ui.enabled=false "
               "--conf spark.ui.showConsoleProgress=false --conf spark.sql.shuffle.partitions=2 "
               "--jars %s pyspark-shell" % ",".join(jars))
env.setdefault("PYSPARK_PYTHON", sys.executable)
log_path = os.path.join(a.work, "spark.log")
started = time.time()
with open(log_path, "w") as log_file:
    proc = subprocess.Popen([sys.executable, a.script, "--base", a.work, "--trigger", "0 seconds"],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
poller = threading.Thread(target=poll, daemon=True)
poller.start()
try:
    land(WARMUP)
    while WARMUP not in visible:
        if proc.poll() is not None:
            sys.exit("the exported script stopped (rc %s); see %s" % (proc.returncode, log_path))
        if time.time() - started > a.warmup_timeout:
            sys.exit("the warm-up row did not reach gold in %.0f s; see %s" % (a.warmup_timeout, log_path))
        time.sleep(0.05)
    warm_s = time.time() - started
    interval = 1.0 / max(a.rate, 0.01)
    t0 = time.time()
    for i in range(a.files):
        due = t0 + i * interval
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        land(i)
    deadline = time.time() + 120
    while sum(1 for i in range(a.files) if i in visible) < a.files and time.time() < deadline:
        time.sleep(0.05)
finally:
    done.set()
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

lat = sorted(v for k, v in visible.items() if 0 <= k < a.files)
if len(lat) < a.files:
    print(json.dumps({"case": "latency (3 hops, spark+delta)", "error": "%d of %d files visible within 120 s"
                      % (len(lat), a.files)}))
    sys.exit(1)
pct = lambda p: lat[int(round((len(lat) - 1) * p))]
print(json.dumps({"case": "latency (3 hops, spark+delta, default trigger)", "files": len(lat),
                  "rate_files_per_s": a.rate, "warmup_s": round(warm_s, 1), "median_ms": pct(0.5),
                  "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": lat[-1]}))
