//! The batch side of the `delta_merge` sink: one row per key before a MERGE.
//!
//! Delta's MERGE fails when several source rows match one target row (Spark:
//! `DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE`), and a CDC feed often
//! carries several changes of a key in one batch, so the batch is reduced to the
//! latest row per key first: the greatest `order_by` value (nulls count as
//! oldest); on a tie, or without `order_by`, the row that arrived last. This is
//! the "foreachBatch + dedupe + MERGE" pattern of Spark's documentation, done by
//! DataFusion (`ROW_NUMBER() OVER (PARTITION BY keys ORDER BY ...)`).

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

/// The rows of `batches` reduced to one per key (see the module doc), as a DataFrame.
pub async fn latest_per_key(
    batches: Vec<RecordBatch>,
    keys: &[String],
    order_by: Option<&str>,
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
        "SELECT {projection} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order}) AS {RANK} FROM batch) WHERE {RANK} = 1"
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
        let df = latest_per_key(vec![b1, b2], &["id".into()], Some("v"))
            .await
            .expect("dedupe");
        // id 1: v=5 twice ("a" then "e"): the later arrival wins; id 2: tie, "d" arrived last;
        // the null key is one key (null-safe), "n2" arrived last.
        assert_eq!(rows(df).await, vec!["1:5:e", "2:1:d", "null:1:n2"]);
    }

    #[tokio::test]
    async fn without_order_by_the_last_arrival_wins() {
        let b = batch(&[Some(1), Some(1), Some(1)], &[9, 1, 4], &["x", "y", "z"]);
        let df = latest_per_key(vec![b], &["id".into()], None)
            .await
            .expect("dedupe");
        assert_eq!(rows(df).await, vec!["1:4:z"]);
    }

    #[tokio::test]
    async fn an_unknown_key_is_refused_with_the_columns() {
        let b = batch(&[Some(1)], &[1], &["x"]);
        let err = latest_per_key(vec![b], &["nope".into()], None)
            .await
            .expect_err("unknown key");
        assert!(err.to_string().contains("\"nope\""), "{err}");
        assert!(err.to_string().contains("id, v, name"), "{err}");
    }
}
