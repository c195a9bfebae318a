//! The batch side of the `delta_merge` sink: one row per key before a MERGE.
//!
//! Delta's MERGE fails when several source rows match one target row (Spark:
//! `DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE`). A CDC feed often
//! carries several changes of a key in one batch; with `order_by` the batch is
//! reduced to the latest row per key first: the greatest `order_by` value (nulls
//! count as oldest), on a tie the row that arrived last. This is the
//! "foreachBatch + dedupe + MERGE" pattern of Spark's documentation, done by
//! DataFusion (`ROW_NUMBER() OVER (PARTITION BY keys ORDER BY ...)`). Without
//! `order_by` nothing says which row is newest, so a batch with two rows of one key
//! fails before anything is written, naming the key, as Delta's MERGE does (arrival
//! order within a batch is not a change order weir can vouch for).
//!
//! Keys compare as SQL's `=` does (Delta's and Spark's MERGE condition): a null key
//! matches nothing, so every row with a null key is inserted as a row of its own and
//! never deduplicated. With `null_safe_keys = true` they compare with `<=>` (`IS NOT
//! DISTINCT FROM`): null is a key like any other.

use std::sync::Arc;

use arrow::array::UInt64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::prelude::{DataFrame, SessionContext};

use crate::error::{Error, Result};

const SEQ: &str = "__weir_arrival";
const RANK: &str = "__weir_rank";

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The rows of `batches` reduced to one per key (see the module doc), as a DataFrame;
/// without `order_by`, an error naming the first key that has several rows.
pub async fn latest_per_key(
    batches: Vec<RecordBatch>,
    keys: &[String],
    order_by: Option<&str>,
    null_safe: bool,
) -> Result<DataFrame> {
    let df_err = |context: &str, e: datafusion::error::DataFusionError| Error::Plan {
        flow: String::new(),
        message: format!("delta_merge: {context}: {e}"),
    };
    let Some(first) = batches.first() else {
        return Err(Error::Plan {
            flow: String::new(),
            message: "delta_merge: no batch to deduplicate".into(),
        });
    };
    let schema = first.schema();
    for key in keys.iter().map(String::as_str).chain(order_by) {
        if schema.field_with_name(key).is_err() {
            return Err(Error::Plan {
                flow: String::new(),
                message: format!(
                    "delta_merge: column {key:?} is not in the flow's output ({}); keys and order_by name output columns",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    // Arrival order as a column, so ties resolve deterministically.
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(SEQ, DataType::UInt64, false)));
    let with_seq_schema = Arc::new(Schema::new(fields));
    let mut seq = 0u64;
    let mut numbered = Vec::with_capacity(batches.len());
    for batch in &batches {
        let n = batch.num_rows() as u64;
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from_iter_values(seq..seq + n)));
        seq += n;
        numbered.push(
            RecordBatch::try_new(with_seq_schema.clone(), columns).map_err(|source| {
                Error::Arrow {
                    context: "numbering rows for delta_merge".into(),
                    source,
                }
            })?,
        );
    }
    let ctx = SessionContext::new();
    let table = datafusion::datasource::MemTable::try_new(with_seq_schema, vec![numbered])
        .map_err(|e| df_err("registering the batch", e))?;
    ctx.register_table("batch", Arc::new(table))
        .map_err(|e| df_err("registering the batch", e))?;
    let partition = keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
    // SQL's `=`: rows with a null key match nothing and are kept, each on its own.
    let null_key = if null_safe {
        "FALSE".to_string()
    } else {
        keys.iter()
            .map(|k| format!("{} IS NULL", quote(k)))
            .collect::<Vec<_>>()
            .join(" OR ")
    };
    if order_by.is_none() {
        let key_list = keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
        let duplicates = ctx
            .sql(&format!(
                "SELECT {key_list}, COUNT(*) AS n FROM batch WHERE NOT ({null_key}) GROUP BY {key_list} HAVING COUNT(*) > 1 LIMIT 1"
            ))
            .await
            .map_err(|e| df_err("looking for keys with several rows", e))?
            .collect()
            .await
            .map_err(|e| df_err("looking for keys with several rows", e))?;
        if let Some(b) = duplicates.iter().find(|b| b.num_rows() > 0) {
            let options = arrow::util::display::FormatOptions::default().with_null("null");
            let mut parts = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let value =
                    arrow::util::display::ArrayFormatter::try_new(b.column(i).as_ref(), &options)
                        .map(|f| f.value(0).to_string())
                        .unwrap_or_default();
                parts.push(format!("{k}={value}"));
            }
            let n = arrow::util::display::ArrayFormatter::try_new(
                b.column(keys.len()).as_ref(),
                &options,
            )
            .map(|f| f.value(0).to_string())
            .unwrap_or_default();
            return Err(Error::Plan {
                flow: String::new(),
                message: format!(
                    "delta_merge: {n} rows of the batch have the key {} and no order_by says which is the newest; \
                     Delta's MERGE refuses several source rows for one target row \
                     (DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE). Nothing was written. \
                     Set order_by = \"<column>\" (e.g. an update timestamp or sequence number) so the newest row wins, \
                     or deduplicate upstream",
                    parts.join(", ")
                ),
            });
        }
    }
    let order = match order_by {
        Some(o) => format!("{} DESC NULLS LAST, {SEQ} DESC", quote(o)),
        None => format!("{SEQ} DESC"),
    };
    let projection = schema
        .fields()
        .iter()
        .map(|f| quote(f.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT {projection} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order}) AS {RANK} FROM batch) WHERE {RANK} = 1 OR {null_key}"
    );
    ctx.sql(&sql)
        .await
        .map_err(|e| df_err("deduplicating the batch by key", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int64Array, StringArray};

    fn batch(ids: &[Option<i64>], versions: &[i64], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.to_vec())),
                Arc::new(Int64Array::from(versions.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .expect("batch")
    }

    async fn rows(df: DataFrame) -> Vec<String> {
        let out = df.collect().await.expect("collect");
        let mut rows = Vec::new();
        for b in &out {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("id");
            let vs = b
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("v");
            let names = b
                .column(2)
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("name");
            for i in 0..b.num_rows() {
                rows.push(format!(
                    "{}:{}:{}",
                    if ids.is_null(i) {
                        "null".to_string()
                    } else {
                        ids.value(i).to_string()
                    },
                    vs.value(i),
                    names.value(i)
                ));
            }
        }
        rows.sort();
        rows
    }

    #[tokio::test]
    async fn keeps_the_greatest_order_by_then_the_last_arrival() {
        let b1 = batch(
            &[Some(1), Some(2), Some(1), None],
            &[5, 1, 3, 1],
            &["a", "b", "c", "n1"],
        );
        let b2 = batch(&[Some(2), Some(1), None], &[1, 5, 1], &["d", "e", "n2"]);
        let df = latest_per_key(
            vec![b1.clone(), b2.clone()],
            &["id".into()],
            Some("v"),
            false,
        )
        .await
        .expect("dedupe");
        // id 1: v=5 twice ("a" then "e"): the later arrival wins; id 2: tie, "d" arrived
        // last; a null key matches nothing (SQL's `=`): both null-key rows are kept.
        assert_eq!(
            rows(df).await,
            vec!["1:5:e", "2:1:d", "null:1:n1", "null:1:n2"]
        );
        // null_safe_keys: null is one key, "n2" arrived last.
        let df = latest_per_key(vec![b1, b2], &["id".into()], Some("v"), true)
            .await
            .expect("dedupe");
        assert_eq!(rows(df).await, vec!["1:5:e", "2:1:d", "null:1:n2"]);
    }

    #[tokio::test]
    async fn without_order_by_two_rows_of_one_key_fail_naming_the_key() {
        let b = batch(
            &[Some(1), Some(3), Some(3), None, None],
            &[9, 1, 4, 1, 2],
            &["x", "y", "z", "n1", "n2"],
        );
        let err = latest_per_key(vec![b.clone()], &["id".into()], None, false)
            .await
            .expect_err("several rows of id 3");
        let message = err.to_string();
        assert!(
            message.contains("2 rows of the batch have the key id=3"),
            "{message}"
        );
        assert!(message.contains("order_by"), "{message}");
        // Distinct keys (and null keys, which match nothing) pass unchanged.
        let ok = batch(
            &[Some(1), Some(3), None, None],
            &[9, 1, 1, 2],
            &["x", "y", "n1", "n2"],
        );
        let df = latest_per_key(vec![ok.clone()], &["id".into()], None, false)
            .await
            .expect("no duplicate key");
        assert_eq!(
            rows(df).await,
            vec!["1:9:x", "3:1:y", "null:1:n1", "null:2:n2"]
        );
        // With null_safe_keys two null keys are one key twice.
        let err = latest_per_key(vec![ok], &["id".into()], None, true)
            .await
            .expect_err("two null keys");
        assert!(err.to_string().contains("the key id=null"), "{err}");
    }

    #[tokio::test]
    async fn an_unknown_key_is_refused_with_the_columns() {
        let b = batch(&[Some(1)], &[1], &["x"]);
        let err = latest_per_key(vec![b], &["nope".into()], None, false)
            .await
            .expect_err("unknown key");
        assert!(err.to_string().contains("\"nope\""), "{err}");
        assert!(err.to_string().contains("id, v, name"), "{err}");
    }
}
