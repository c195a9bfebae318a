"""Spark's Kafka source on the Kafka benchmark's topic (benches/kafka.rs): JSON values parsed
with from_json, availableNow, maxOffsetsPerTrigger, local[2], into Delta (with the Delta jars of
scripts/spark-delta-setup.sh) or parquet.

Usage: python bench_spark_kafka.py --bootstrap HOST:PORT --topic T --jars DIR
           [--delta-jars DIR] [--max-offsets 500000] [--repeat 2]
Prints one JSON line per repetition (rep 0 = cold JVM, later = warm).
"""
import argparse, glob, json, os, shutil, sys, tempfile, time

T0 = time.time()
ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", required=True)
ap.add_argument("--topic", required=True)
ap.add_argument("--jars", required=True)
ap.add_argument("--delta-jars", default=os.path.expanduser("~/.cache/weir-jars/delta"))
ap.add_argument("--max-offsets", type=int, default=500000)
ap.add_argument("--repeat", type=int, default=2)
a = ap.parse_args()
work = tempfile.mkdtemp(prefix="spark-kafka-")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession, functions as F

# Spark's Kafka source and what it needs beyond Spark (Spark brings Scala, snappy, lz4, slf4j).
KEEP = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")
jars = sorted(j for j in glob.glob(os.path.join(a.jars, "*.jar")) if os.path.basename(j).startswith(KEEP))
delta = sorted(glob.glob(os.path.join(a.delta_jars, "*.jar"))) if os.path.isdir(a.delta_jars) else []
b = (SparkSession.builder.master("local[2]").appName("weir-kafka-peer")
     .config("spark.jars", ",".join(jars + delta))
     .config("spark.sql.shuffle.partitions", "2")
     .config("spark.sql.session.timeZone", "UTC")
     .config("spark.ui.enabled", "false")
     .config("spark.ui.showConsoleProgress", "false")
     .config("spark.driver.memory", "4g"))
if delta:
    b = (b.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
spark = b.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
t_session = time.time()
SCHEMA = "event_id BIGINT, key STRING, event_time TIMESTAMP, amount DOUBLE"
fmt = "delta" if delta else "parquet"

for rep in range(a.repeat):
    run = os.path.join(work, f"rep{rep}")
    shutil.rmtree(run, ignore_errors=True)
    t1 = time.time()
    df = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", a.bootstrap)
          .option("subscribe", a.topic)
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", a.max_offsets)
          .load())
    out = df.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("v")).select("v.*")
    q = (out.writeStream.format(fmt).outputMode("append")
         .option("checkpointLocation", os.path.join(run, "checkpoint"))
         .trigger(availableNow=True).start(os.path.join(run, "sink")))
    q.awaitTermination()
    t2 = time.time()
    progs = [json.loads(p.json()) for p in q._jsq.recentProgress()]
    rows = sum(p.get("numInputRows", 0) for p in progs)
    rows_out = spark.read.format(fmt).load(os.path.join(run, "sink")).count()
    print(json.dumps({
        "case": "kafka-ingest", "engine": "spark", "version": spark.version, "sink": fmt, "rep": rep,
        "jvm": "cold" if rep == 0 else "warm", "rows_in": rows, "rows_out": rows_out,
        "batches": len(progs), "query_wall_s": round(t2 - t1, 2),
        "jvm_start_s": round(t_session - T0, 2), "rows_per_s": round(rows_out / (t2 - t1)),
        "max_offsets_per_trigger": a.max_offsets,
    }), flush=True)
def jvm_peak_rss_mib():
    """The driver JVM's peak RSS (VmHWM), local[2]: the whole engine."""
    try:
        pid = spark.sparkContext._gateway.proc.pid
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except Exception:
        return None
peak = jvm_peak_rss_mib()
spark.stop()
shutil.rmtree(work, ignore_errors=True)
print(json.dumps({"process_total_s": round(time.time() - T0, 2), "jvm_peak_rss_mib": peak}))
