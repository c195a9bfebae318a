"""The oracle of tests/it/change_feed.rs: Spark + Delta stream a table's change data
feed (`readChangeFeed`, `startingVersion` 0, trigger availableNow) into a Delta table.

Usage: read_change_feed.py TABLE OUT CHECKPOINT
"""
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension").config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog").getOrCreate()
table, out, ckpt = sys.argv[1], sys.argv[2], sys.argv[3]
q = (spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(table)
     .writeStream.format("delta").option("checkpointLocation", ckpt).trigger(availableNow=True).start(out))
q.awaitTermination()
