"""Times a script written by `weir export pyspark` on Spark + Delta, flow by flow.

The script is imported as a module and its flows run as its own `main` runs them (one
SparkSession, flows in dependency order, each drained with its trigger), with a clock
around each flow. Prints one JSON line per flow and one for the total:

  {"engine": "spark+delta", "flow": ..., "input_rows": ..., "output_rows": ..., "batches": ..., "s": ...}
  {"engine": "spark+delta", "case": "total", "session_s": ..., "flows_s": ..., "total_s": ...}

`input_rows` sums `numInputRows` of the flow's main query; `output_rows` counts its Delta
table after the run (outside the clock). `session_s` is the JVM and SparkSession start.

Usage:
  python bench_export.py --script PIPELINE.py [--jars DIR] [--driver-memory 4g] -- SCRIPT-ARGS...

Without PYSPARK_SUBMIT_ARGS in the environment it runs `local[2]` with the Delta jars
of DIR (default ~/.cache/weir-jars/delta, made by scripts/spark-delta-setup.sh), 2
shuffle partitions and no UI.
"""
import argparse
import glob
import importlib.util
import json
import os
import sys
import time

T0 = time.time()
ap = argparse.ArgumentParser()
ap.add_argument("--script", required=True)
ap.add_argument("--jars", default=os.path.expanduser("~/.cache/weir-jars/delta"))
ap.add_argument("--driver-memory", default="4g")
ap.add_argument("rest", nargs=argparse.REMAINDER)
a = ap.parse_args()
rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest

if "PYSPARK_SUBMIT_ARGS" not in os.environ:
    jars = sorted(glob.glob(os.path.join(a.jars, "*.jar")))
    if not jars:
        sys.exit("no Delta jars in %s: run scripts/spark-delta-setup.sh" % a.jars)
    os.environ["PYSPARK_SUBMIT_ARGS"] = (
        "--master local[2] --driver-memory %s --conf spark.ui.enabled=false "
        "--conf spark.ui.showConsoleProgress=false --conf spark.sql.shuffle.partitions=2 "
        "--jars %s pyspark-shell" % (a.driver_memory, ",".join(jars)))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

spec = importlib.util.spec_from_file_location("exported", a.script)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

args = mod._parse_args(rest)
spark = mod._session(mod.APP_NAME)
spark.sparkContext.setLogLevel("WARN")
t_session = time.time()
flows_s = 0.0
for name in [f for f in mod.ORDER if not args.flow or f in args.flow]:
    trigger = args.trigger or mod.TRIGGERS[name]
    if trigger not in ("available_now", "once"):
        sys.exit("flow %s: the bench drains flows; use --trigger available_now" % name)
    t = time.time()
    queries = mod.FLOWS[name](spark, args)
    for q in queries:
        q.awaitTermination()
    secs = time.time() - t
    flows_s += secs
    progress = [json.loads(p.json()) for p in queries[0]._jsq.recentProgress()]
    sink = mod._path(args, name + ".sink")
    out_rows = spark.read.format("delta").load(sink).count() if mod._is_delta(spark, sink) else 0
    print(json.dumps({"engine": "spark+delta", "version": spark.version, "flow": name,
                      "input_rows": sum(p["numInputRows"] for p in progress),
                      "output_rows": out_rows, "batches": len(progress), "s": round(secs, 2)}),
          flush=True)
print(json.dumps({"engine": "spark+delta", "case": "total", "session_s": round(t_session - T0, 2),
                  "flows_s": round(flows_s, 2), "total_s": round(t_session - T0 + flows_s, 2)}),
      flush=True)
spark.stop()
