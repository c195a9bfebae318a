"""The weir demo pipeline on Apache Spark Structured Streaming (local[2], availableNow).

Same flows as assets/pipelines/flights.toml, with parquet directories instead of
Delta tables between hops (Delta jars cannot be fetched here): each hop reads the
previous hop's output as a streaming file source.

  bronze_flights  CSV (flights x10) -> parquet (+ source_file, ingested_at)
  bronze_weather  CSV (weather, one file per day) -> parquet
  silver_flights  bronze -> dep_time IS NOT NULL, LEFT JOIN airlines, airports,
                  watermark 1 day, dropDuplicates(carrier, flight, origin, time_hour)
  gold            silver -> watermark 2 hours, 1-hour windows per origin: count, avg(dep_delay)
  flights_weather silver -> LEFT JOIN weather (static) ON origin, time_hour

Usage: python bench_spark_pipeline.py --flights DIR --weather DIR --dims DIR [--work DIR]
Prints one JSON line per flow and one for the total (JVM start included).
"""
import argparse, json, os, shutil, sys, tempfile, time

T0 = time.time()
ap = argparse.ArgumentParser()
ap.add_argument("--flights", required=True)
ap.add_argument("--weather", required=True)
ap.add_argument("--dims", required=True)
ap.add_argument("--work", default=None)
a = ap.parse_args()
work = a.work or tempfile.mkdtemp(prefix="spark-pipeline-")
shutil.rmtree(work, ignore_errors=True)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession, functions as F

spark = (SparkSession.builder.master("local[2]").appName("weir-pipeline-peer")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "4g")
         .getOrCreate())
spark.sparkContext.setLogLevel("WARN")
t_session = time.time()

FLIGHTS = ("year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE, "
           "arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT, "
           "tailnum STRING, origin STRING, dest STRING, air_time DOUBLE, distance DOUBLE, "
           "hour INT, minute INT, time_hour TIMESTAMP")
WEATHER = ("origin STRING, year INT, month INT, day INT, hour INT, temp DOUBLE, dewp DOUBLE, "
           "humid DOUBLE, wind_dir DOUBLE, wind_speed DOUBLE, wind_gust DOUBLE, precip DOUBLE, "
           "pressure DOUBLE, visib DOUBLE, time_hour TIMESTAMP")
P = lambda *x: os.path.join(work, *x)


def run(name, df, sink, mode="append"):
    t = time.time()
    q = (df.writeStream.format("parquet").outputMode(mode)
         .option("checkpointLocation", P("_checkpoints", name))
         .trigger(availableNow=True).start(sink))
    q.awaitTermination()
    secs = time.time() - t
    progs = [json.loads(p.json()) for p in q._jsq.recentProgress()]
    rows_in = sum(p["numInputRows"] for p in progs)
    rows_out = spark.read.parquet(sink).count()
    print(json.dumps({"engine": "spark", "version": spark.version, "flow": name,
                      "input_rows": rows_in, "output_rows": rows_out, "batches": len(progs),
                      "s": round(secs, 2), "rows_per_s": round(rows_in / secs) if secs else 0}),
          flush=True)


run("bronze_flights",
    spark.readStream.schema(FLIGHTS).option("header", True).option("nullValue", "NA")
    .option("maxFilesPerTrigger", 100).option("recursiveFileLookup", True).csv(a.flights)
    .select("*", F.col("_metadata.file_path").alias("source_file"),
            F.current_timestamp().alias("ingested_at")),
    P("lake/bronze/flights"))
run("bronze_weather",
    spark.readStream.schema(WEATHER).option("header", True).option("nullValue", "NA")
    .option("maxFilesPerTrigger", 100).option("recursiveFileLookup", True).csv(a.weather),
    P("lake/bronze/weather"))

bronze = spark.read.parquet(P("lake/bronze/flights")).schema
airlines = spark.read.option("header", True).csv(os.path.join(a.dims, "airlines.csv"))
airports = (spark.read.option("header", True).option("nullValue", "NA")
            .csv(os.path.join(a.dims, "airports.csv"))
            .select(F.col("faa"), F.col("name").alias("dest_name"), F.col("tzone").alias("dest_tzone")))
silver = (spark.readStream.schema(bronze).parquet(P("lake/bronze/flights"))
          .where("dep_time IS NOT NULL")
          .join(airlines.withColumnRenamed("name", "airline_name"), "carrier", "left")
          .join(airports, F.col("dest") == F.col("faa"), "left").drop("faa")
          .withWatermark("time_hour", "1 day")
          .dropDuplicates(["carrier", "flight", "origin", "time_hour"]))
run("silver_flights", silver, P("lake/silver/flights"))

silver_schema = spark.read.parquet(P("lake/silver/flights")).schema
gold = (spark.readStream.schema(silver_schema).parquet(P("lake/silver/flights"))
        .withWatermark("time_hour", "2 hours")
        .groupBy(F.window("time_hour", "1 hour"), "origin")
        .agg(F.count("*").alias("departures"), F.avg("dep_delay").alias("avg_dep_delay")))
run("gold_departures_hourly", gold, P("lake/gold/departures_hourly"))

weather = spark.read.parquet(P("lake/bronze/weather")).select("origin", "time_hour", "temp", "wind_speed", "precip", "visib")
fw = (spark.readStream.schema(silver_schema).parquet(P("lake/silver/flights"))
      .join(weather, ["origin", "time_hour"], "left")
      .select("carrier", "flight", "origin", "dest", "time_hour", "dep_delay", "temp", "wind_speed", "precip", "visib"))
run("flights_weather", fw, P("lake/gold/flights_weather"))

spark.stop()
print(json.dumps({"engine": "spark", "case": "pipeline", "jvm_start_s": round(t_session - T0, 2),
                  "process_total_s": round(time.time() - T0, 2)}))
