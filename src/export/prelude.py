import argparse
import json
import os
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window


def _path(args, key):
    """The path of KEY (see PATHS): --path KEY=... or the pipeline's, relative to --base."""
    p = args.paths[key]
    return p if "://" in p or os.path.isabs(p) else os.path.join(args.base, p)


def _trigger(writer, args, flow):
    """The flow's trigger, or --trigger for every flow (weir run --trigger)."""
    t = args.trigger or TRIGGERS[flow]
    if t == "available_now":
        return writer.trigger(availableNow=True)
    if t == "once":
        return writer.trigger(once=True)
    if t == "0 seconds":
        return writer
    return writer.trigger(processingTime=t)


def _query_id(spark, checkpoint):
    """The streaming query's id (the checkpoint's `metadata`): the Delta txn app id of its writes."""
    return json.loads(spark.read.text(checkpoint.rstrip("/") + "/metadata").first()[0])["id"]


def _is_delta(spark, table):
    from delta.tables import DeltaTable

    try:
        return DeltaTable.isDeltaTable(spark, table)
    except Exception:  # a path that does not exist yet
        return False


def _append(df, table, app_id, batch_id, mode="append", partition_by=(), merge_schema=False):
    """One Delta commit carrying txn(app_id, batch_id): a replayed batch is skipped by Delta."""
    w = df.write.format("delta").mode(mode).option("txnAppId", app_id).option("txnVersion", batch_id)
    if partition_by:
        w = w.partitionBy(*partition_by)
    if merge_schema:
        w = w.option("mergeSchema", "true")
    w.save(table)


def _latest_per_key(df, keys, order_by):
    """weir's in-batch reduction before a MERGE: per key (nulls are one key) the row with the
    greatest order_by (nulls oldest), then the one read last."""
    seq = "__weir_seq"
    df = df.withColumn(seq, F.monotonically_increasing_id())
    order = ([F.col(order_by).desc_nulls_last()] if order_by else []) + [F.col(seq).desc()]
    w = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(*order)
    return df.withColumn("__weir_rank", F.row_number().over(w)).where("__weir_rank = 1").drop("__weir_rank", seq)


def _merge(spark, df, table, app_id, batch_id, keys, order_by, null_safe, partition_by=()):
    """weir's delta_merge: one MERGE commit per batch, idempotent by txnAppId/txnVersion.
    Without order_by, several rows of one key in a batch stop the query, as in weir."""
    from delta.tables import DeltaTable

    if order_by:
        df = _latest_per_key(df, keys, order_by)
    else:
        keyed = df if null_safe else df.dropna(subset=list(keys))
        dup = keyed.groupBy(*keys).count().where("count > 1").limit(1).collect()
        if dup:
            raise ValueError("delta_merge into %s: batch %d has several rows of the key %s and no order_by "
                             "to choose one (weir refuses this too)" % (table, batch_id, dup[0].asDict()))
    if not _is_delta(spark, table):
        _append(df, table, app_id, batch_id, partition_by=partition_by)
        return
    op = "<=>" if null_safe else "="
    cond = " AND ".join("t.`{0}` {1} s.`{0}`".format(k.replace("`", "``"), op) for k in keys)
    spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    # weir's cross-batch rule: an older row never overwrites a newer one (nulls oldest,
    # ties to the later batch).
    newer = None
    if order_by:
        o = order_by.replace("`", "``")
        newer = "t.`{0}` IS NULL OR s.`{0}` >= t.`{0}`".format(o)
    try:
        (DeltaTable.forPath(spark, table).alias("t").merge(df.alias("s"), cond)
         .whenMatchedUpdateAll(condition=newer).whenNotMatchedInsertAll().execute())
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def _late_rows(spark, df, batch_id, table, marks, app_id, column, delay_ms, drops_late):
    """weir's late_rows side output, computed by a companion query over the same input.

    Spark's stateful operators drop late rows without exposing them, so the companion query
    applies weir's rule to its own batches: the watermark of batch N is
    max(watermark of N-1, max event time through N-1 - delay); a row whose event time is
    before it (or null) is written to the late-rows table. Each batch's watermark is kept in
    the Delta table MARKS (in the companion's checkpoint), written with the same txn.
    """
    wm_ms = 0
    if _is_delta(spark, marks):
        prev = (spark.read.format("delta").load(marks).where(F.col("batch_id") < batch_id)
                .orderBy(F.col("batch_id").desc()).first())
        if prev is not None:
            wm_ms = prev["next_watermark_ms"]
    t = F.col(column).cast("timestamp")
    df = df.withColumn("__weir_t", F.unix_micros(t)).cache()
    try:
        late_cond = F.col("__weir_t").isNull()
        if drops_late:
            late_cond = late_cond | (F.col("__weir_t") < F.lit(wm_ms * 1000))
        late = df.where(late_cond).drop("__weir_t")
        if late.take(1):
            _append(late, table, app_id, batch_id)
        max_t = df.agg(F.max("__weir_t")).first()[0]
        next_ms = wm_ms if max_t is None else max(wm_ms, max_t // 1000 - delay_ms)
        mark = spark.createDataFrame([(batch_id, wm_ms, next_ms)],
                                     "batch_id LONG, watermark_ms LONG, next_watermark_ms LONG")
        _append(mark, marks, app_id, batch_id)
    finally:
        df.unpersist()


# OSS Spark has no rescued-data column: a record that did not fit the schema is kept whole
# (Spark's PERMISSIVE `_corrupt_record`) in `_rescued_data`, with its file (docs/spark.md).
_RESCUED = ("CAST(CASE WHEN _corrupt_record IS NOT NULL THEN to_json(named_struct("
            "'_corrupt_record', _corrupt_record, '_file_path', _metadata.file_path)) END AS STRING) AS _rescued_data")


def _q(name):
    """A column name as a Spark SQL identifier."""
    return "`%s`" % name.replace("`", "``")


def _default_items(left, sides):
    """weir's select list when a join flow has none: the stream's columns, then each other
    side's columns except its USING keys, a name already taken prefixed with the alias."""
    taken = list(left)
    items = ["batch." + _q(c) for c in left]
    for alias, columns, using in sides:
        for c in columns:
            if c in using:
                continue
            name = c if c not in taken else "%s_%s" % (alias, c)
            items.append("%s.%s AS %s" % (_q(alias), _q(c), _q(name)))
            taken.append(name)
    return items


def _wait_for_table(spark, table, flow):
    """weir waits for a Delta source table that does not exist yet; Spark would fail."""
    while not _is_delta(spark, table):
        print("weir-export: flow %s waits for the Delta table %s" % (flow, table), file=sys.stderr)
        time.sleep(1)


def _session(app_name):
    builder = SparkSession.builder.appName(app_name)
    if TARGET == "oss":
        builder = (builder
                   .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    spark = builder.getOrCreate()
    # weir reads and writes timestamps as UTC instants.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    # weir filters a batch's late rows with that batch's watermark. Spark 3.4+ filters them
    # with the previous batch's (IncrementalExecution: eventTimeWatermarkForLateEvents =
    # prevOffsetSeqMetadata.batchWatermarkMs) unless allowMultiple is off, which also makes
    # eviction and late filtering use one watermark. A weir flow has one stateful operator.
    # Set only when a flow keeps its late rows (late_rows), so that both engines list the
    # same rows; otherwise Spark's default, which drops fewer rows, is kept.
    if SINGLE_WATERMARK:
        spark.conf.set("spark.sql.streaming.statefulOperator.allowMultiple", "false")
    return spark


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help="directory the relative paths are resolved against (default: %(default)s)")
    ap.add_argument("--path", action="append", default=[], metavar="KEY=PATH",
                    help="override one path; keys: " + ", ".join(sorted(PATHS)))
    ap.add_argument("--flow", action="append", default=[], choices=ORDER, help="run only this flow (repeatable)")
    ap.add_argument("--trigger", default=None,
                    help="available_now, once, or a processing-time interval such as '10 seconds', for every flow")
    args = ap.parse_args(argv)
    args.paths = dict(PATHS)
    for item in args.path:
        key, sep, value = item.partition("=")
        if not sep or key not in PATHS:
            ap.error("--path %r: use KEY=PATH with KEY one of %s" % (item, ", ".join(sorted(PATHS))))
        args.paths[key] = value
    if args.trigger in ("available-now", "availableNow"):
        args.trigger = "available_now"
    return args


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    spark = _session(APP_NAME)
    flows = [f for f in ORDER if not args.flow or f in args.flow]
    running = []
    for name in flows:
        finite = (args.trigger or TRIGGERS[name]) in ("available_now", "once")
        for table in DELTA_INPUTS[name]:
            if not _is_delta(spark, _path(args, table)):
                if finite:
                    print("weir-export: flow %s: no Delta table at %s yet, nothing to do" % (name, _path(args, table)),
                          file=sys.stderr)
                    break
                _wait_for_table(spark, _path(args, table), name)
        else:
            queries = FLOWS[name](spark, args)
            if finite:
                for q in queries:
                    q.awaitTermination()
                    print("weir-export: flow %s: query %s finished (%d batches)" % (name, q.name, len(q.recentProgress)),
                          file=sys.stderr)
            else:
                running.extend(queries)
    if running:
        spark.streams.awaitAnyTermination()
    return 0
