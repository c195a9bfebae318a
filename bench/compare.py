#!/usr/bin/env python3
"""weir and Apache Spark back to back on the same inputs, with the ratios (issue #16).

Usage:
  python3 bench/compare.py [--runs 3] [--cases ingest,window,pipeline]
                           [--engines weir,spark] [--work DIR]

Cases (each engine runs each case --runs times, alternating weir and Spark, and the
medians are compared):

  ingest    bronze ingest of flights x10 (520 CSV files, 3.37 M rows) into a table:
            weir `cargo bench --bench ingest` (case ingest: `weir run --headless`, a
            process per run) against bench/spark/bench_spark.py --case flights-ingest
            (PySpark 4.3, local[2], parquet sink, a fresh JVM per run: "cold").
  window    5-minute tumbling count per key over 3.4 M JSON events, 10-minute
            watermark, append: weir's window case against --case window-count.
            (ingest and window: PySpark 4.3 from bench/spark/setup.sh.)
  pipeline  the demo pipeline (assets/pipelines/flights.toml) on flights x10, all five
            flows: weir `cargo bench --bench pipeline` (case pipeline, in one process)
            against the script `weir export pyspark` writes for the same pipeline, on
            Spark + Delta (PySpark 4.2 + Delta 4.4 from scripts/spark-delta-setup.sh,
            bench/spark/bench_export.py; same files, Delta tables, the stream-stream
            join), one process each.

The Spark figure is the whole process (JVM and SparkSession start included, as a user
waits for it); the query-only time is printed beside it. Needs Java 17, the PySpark venv
of bench/spark/setup.sh (ingest, window) and of scripts/spark-delta-setup.sh (pipeline);
both are made on first use. Inputs: $WEIR_BENCH_DIR (default /var/tmp/weir-bench-inputs),
made by bench/spark/gen_inputs.sh when missing. Run it on an idle machine: it builds
first, then measures. Prints every raw JSON line on stderr and a table on stdout; for
ingest also weir against the decode+encode limits run by run (the plain arrow-csv +
Parquet program, and one doing weir's work: its NA blanking and its columns), with
the medians, and how many of the 2 cores weir kept busy.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.environ.get("WEIR_BENCH_DIR", "/var/tmp/weir-bench-inputs")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run(cmd, env=None, cwd=ROOT):
    log("$ " + " ".join(cmd))
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, cwd=cwd, env=full, stdout=subprocess.PIPE, text=True)
    log(p.stdout.rstrip())
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return json_lines(p.stdout)


def timed(cmd, env=None):
    # The previous run's output is flushed to disk first, untimed: its writeback must
    # not land in this run.
    os.sync()
    start = time.time()
    lines = run(cmd, env)
    return time.time() - start, lines


def venv(script):
    out = subprocess.run([os.path.join(ROOT, script)], cwd=ROOT, stdout=subprocess.PIPE,
                         text=True, check=True).stdout.strip().splitlines()
    return os.path.join(out[-1], "bin", "python")


def weir_bench(bench, case, extra_env=None):
    env = {"WEIR_BENCH_CASES": case, "WEIR_BENCH_RUNS": "1"}
    env.update(extra_env or {})
    return run(["cargo", "bench", "--locked", "--bench", bench], env)


def median(xs):
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\nUsage:")[0],
                                 epilog=__doc__.split("\nUsage:")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per case and engine (default 3)")
    ap.add_argument("--cases", default="ingest,window,pipeline",
                    help="comma-separated: ingest, window, pipeline (default all)")
    ap.add_argument("--engines", default="weir,spark", help="weir, spark or both (default both)")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temp dir)")
    a = ap.parse_args()
    cases = [c for c in a.cases.split(",") if c]
    engines = set(a.engines.split(","))
    work = a.work or tempfile.mkdtemp(prefix="weir-compare-")
    os.makedirs(work, exist_ok=True)

    if not (os.path.isdir(os.path.join(INPUTS, "flights_x10"))
            and os.path.isdir(os.path.join(INPUTS, "events"))):
        run(["bench/spark/gen_inputs.sh", INPUTS])
    if "weir" in engines:
        run(["cargo", "bench", "--locked", "--no-run", "--bench", "ingest", "--bench", "pipeline"])
        run(["cargo", "build", "--release", "--locked", "--bin", "weir"])
    weir_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                            "release", "weir")
    spark_py = venv("bench/spark/setup.sh") if "spark" in engines and (
        "ingest" in cases or "window" in cases) else None
    delta_py = venv("scripts/spark-delta-setup.sh") if "spark" in engines and "pipeline" in cases else None

    # results[case][engine] = list of (total seconds, query seconds or None, peak MiB or None)
    results = {c: {"weir": [], "spark": []} for c in cases}
    # ingest: weir / each decode+encode limit, per run (runs back to back), and cores busy
    limits = {"plain": [], "weirs_work": [], "weir_cores_busy": []}
    for r in range(a.runs):
        for case in cases:
            if case in ("ingest", "window"):
                if "weir" in engines:
                    lines = weir_bench("ingest", case)
                    name = "weir run --headless" if case == "ingest" else "window-count"
                    line = next(l for l in lines if l.get("case", "").startswith(name))
                    results[case]["weir"].append((line["median_s"], None, line.get("peak_rss_mib")))
                    if case == "ingest":
                        ratio = next((l for l in lines if l.get("case") == "ratio"), {})
                        cpu = next((l for l in lines if l.get("case") == "cpu"), {})
                        limits["plain"].append(ratio.get("pairs_median_weir_vs_limit"))
                        limits["weirs_work"].append(ratio.get("pairs_median_weir_vs_limit_weirs_work"))
                        limits["weir_cores_busy"].append(cpu.get("weir_cores_busy"))
                if "spark" in engines:
                    inp = os.path.join(INPUTS, "flights_x10" if case == "ingest" else "events")
                    spark_case = "flights-ingest" if case == "ingest" else "window-count"
                    total, lines = timed([spark_py, "bench/spark/bench_spark.py", "--case", spark_case,
                                          "--input", inp, "--repeat", "1",
                                          "--work", os.path.join(work, f"spark-{case}-{r}")])
                    q = next(l for l in lines if "query_wall_s" in l)
                    results[case]["spark"].append((total, q["query_wall_s"], None))
                    shutil.rmtree(os.path.join(work, f"spark-{case}-{r}"), ignore_errors=True)
            elif case == "pipeline":
                base = os.path.join(work, f"pipeline-{r}")
                shutil.rmtree(base, ignore_errors=True)
                os.makedirs(base)
                weir_dir = os.path.join(base, "weir")
                # weir's run also lands the files the Spark script reads.
                lines = weir_bench("pipeline", "pipeline", {"WEIR_BENCH_WORK": weir_dir})
                line = next(l for l in lines if l.get("case", "").startswith("pipeline"))
                peak = max((f.get("peak_rss_mib") or 0 for f in line["flows"]), default=None)
                if "weir" in engines:
                    results[case]["weir"].append((line["total_s"], None, peak))
                if "spark" in engines:
                    script = os.path.join(base, "flights.py")
                    run([weir_bin, "export", "pyspark", os.path.join(weir_dir, "pipeline.toml"),
                         "-o", script])
                    spark_dir = os.path.join(base, "spark")
                    os.makedirs(spark_dir)
                    os.symlink(os.path.join(weir_dir, "landing"), os.path.join(spark_dir, "landing"))
                    os.symlink(os.path.join(weir_dir, "dims"), os.path.join(spark_dir, "dims"))
                    total, lines = timed([delta_py, "bench/spark/bench_export.py", "--script", script,
                                          "--", "--base", spark_dir])
                    t = next(l for l in lines if l.get("case") == "total")
                    results[case]["spark"].append((total, t.get("flows_s"), None))
                shutil.rmtree(base, ignore_errors=True)
            else:
                sys.exit(f"unknown case {case!r}: ingest, window or pipeline")

    print(f"\nmedians of {a.runs} run(s); Spark = the whole process (JVM start included)\n")
    print("| case | weir s | weir peak MiB | Spark s | Spark query s | Spark / weir |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        w = results[case]["weir"]
        s = results[case]["spark"]
        ws = median([x[0] for x in w])
        wm = median([x[2] for x in w if x[2] is not None])
        ss = median([x[0] for x in s])
        sq = median([x[1] for x in s if x[1] is not None])
        ratio = f"{ss / ws:.1f}x" if ws and ss else "-"
        fmt = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"
        print(f"| {case} | {fmt(ws)} | {fmt(wm, 0)} | {fmt(ss)} | {fmt(sq)} | {ratio} |")
    if "ingest" in cases and "weir" in engines and limits["plain"]:
        print("\ningest, weir / the decode+encode limit, run by run (limit and weir back to back):")
        for key, label in (("plain", "plain limit (arrow-csv with its NA regex)"),
                           ("weirs_work", "limit doing weir's work (its NA blanking, its columns)"),
                           ("weir_cores_busy", "weir's cores busy (CPU / wall; the limits keep 2.00)")):
            vals = [v for v in limits[key] if v is not None]
            shown = ", ".join(f"{v:.3f}" for v in vals)
            print(f"  {label}: {shown}; median {median(vals):.3f}" if vals else f"  {label}: -")
    print(json.dumps({"results": results, "ingest_limits": limits}))


if __name__ == "__main__":
    main()
