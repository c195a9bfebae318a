"""A real Spark query for the live test (tests/it/spark_live.rs).

    python live_query.py DIR

local[2], a rate source (10 rows/s), a 1-second processing-time trigger and a
foreachBatch sink that takes ~2 s per batch (so a kill lands inside a batch).
Writes under DIR: checkpoint/, events/ (the event log, Spark's defaults:
rolling, zstd), progress.jsonl (the listener's progress.json() records),
jvm.pid (the driver JVM, for SIGKILL), and in_batch_<N> when batch N's
sink starts. Runs until killed.
"""

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

d = sys.argv[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.makedirs(os.path.join(d, "events"), exist_ok=True)
spark = (
    SparkSession.builder.master("local[2]")
    .appName("weir-live")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.ui.enabled", "false")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", "file://" + os.path.join(d, "events"))
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


class Progress(StreamingQueryListener):
    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        with open(os.path.join(d, "progress.jsonl"), "a") as f:
            f.write(event.progress.json + "\n")

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


spark.streams.addListener(Progress())
with open(os.path.join(d, "jvm.pid"), "w") as f:
    f.write(str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))


def sink(df, batch_id):
    open(os.path.join(d, f"in_batch_{batch_id}"), "w").close()
    df.count()
    time.sleep(2)


q = (
    spark.readStream.format("rate")
    .option("rowsPerSecond", 10)
    .load()
    .writeStream.queryName("live_rate")
    .foreachBatch(sink)
    .trigger(processingTime="1 second")
    .option("checkpointLocation", os.path.join(d, "checkpoint"))
    .start()
)
q.awaitTermination()
