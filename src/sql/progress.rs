//! The `progress` table: one row per progress record of every flow's
//! `_weir/progress.jsonl` (the records the checkpoint keeps: the last 1,000 to 2,000), with Spark's field names as
//! columns and a `flow` column. Nested records stay nested (`durationMs` and
//! `eventTime` are maps, `sources` and `stateOperators` lists of structs, `sink` and
//! `weir` structs); offsets are JSON text. The columns are fixed (docs/sql.md).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use serde_json::Value;

use super::tables::FlowTables;
use crate::checkpoint::Checkpoint;
use crate::checkpoint::progress::read_progress;

fn int(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}
fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}
fn float(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}
fn map(name: &str, value: DataType) -> Field {
    Field::new_map(
        name,
        "entries",
        Field::new("key", DataType::Utf8, false),
        Field::new("value", value, true),
        false,
        true,
    )
}
fn list_of(name: &str, fields: Vec<Field>) -> Field {
    Field::new_list(
        name,
        Field::new("item", DataType::Struct(Fields::from(fields)), true),
        true,
    )
}

/// The columns of `progress`, in order.
pub fn progress_schema() -> SchemaRef {
    let state_operator = vec![
        text("operatorName"),
        int("numRowsTotal"),
        int("numRowsUpdated"),
        int("allUpdatesTimeMs"),
        int("numRowsRemoved"),
        int("allRemovalsTimeMs"),
        int("commitTimeMs"),
        int("memoryUsedBytes"),
        int("numRowsDroppedByWatermark"),
        int("numShufflePartitions"),
        int("numStateStoreInstances"),
        map("customMetrics", DataType::Int64),
    ];
    let source = vec![
        text("description"),
        text("startOffset"),
        text("endOffset"),
        text("latestOffset"),
        int("numInputRows"),
        float("inputRowsPerSecond"),
        float("processedRowsPerSecond"),
        map("metrics", DataType::Utf8),
    ];
    let sink = vec![text("description"), int("numOutputRows")];
    let weir = vec![
        text("trigger"),
        int("deltaVersion"),
        Field::new("sinkWriteSkipped", DataType::Boolean, true),
        Field::new("replayed", DataType::Boolean, true),
        int("numFiles"),
        int("numBytes"),
        int("numRowsRescued"),
        int("numRecordsCorrupt"),
        int("numFilesFailed"),
        int("numFilesRetried"),
        int("numFilesModifiedAfterIngestion"),
        int("numRowsInvalidEventTime"),
        int("numRowsFutureEventTime"),
        int("numRecordsQuarantined"),
        int("numLateRowsWritten"),
        int("numNewColumnsIgnored"),
        text("health"),
        list_of("errors", vec![text("path"), text("error")]),
        list_of(
            "expectations",
            vec![
                text("name"),
                text("dataset"),
                int("passed_records"),
                int("failed_records"),
            ],
        ),
        int("numRowsDroppedByExpectations"),
    ];
    Arc::new(Schema::new(vec![
        Field::new("flow", DataType::Utf8, false),
        text("id"),
        text("runId"),
        text("name"),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        int("batchId"),
        int("batchDuration"),
        int("numInputRows"),
        float("inputRowsPerSecond"),
        float("processedRowsPerSecond"),
        map("durationMs", DataType::Int64),
        map("eventTime", DataType::Utf8),
        list_of("stateOperators", state_operator),
        list_of("sources", source),
        Field::new("sink", DataType::Struct(Fields::from(sink)), true),
        Field::new("weir", DataType::Struct(Fields::from(weir)), true),
    ]))
}

/// A record as the row the schema decodes: the flow added, offsets as JSON text, the
/// health verdict as its state.
fn row(flow: &str, record: &crate::records::StreamingQueryProgress) -> Option<Value> {
    let mut v = serde_json::to_value(record).ok()?;
    let obj = v.as_object_mut()?;
    obj.insert("flow".into(), Value::String(flow.to_string()));
    if let Some(sources) = obj.get_mut("sources").and_then(Value::as_array_mut) {
        for s in sources.iter_mut().filter_map(Value::as_object_mut) {
            for key in ["startOffset", "endOffset", "latestOffset"] {
                if let Some(o) = s.get_mut(key)
                    && !o.is_null()
                    && !o.is_string()
                {
                    *o = Value::String(o.to_string());
                }
            }
        }
    }
    if let Some(weir) = obj.get_mut("weir").and_then(Value::as_object_mut)
        && let Some(h) = weir.get_mut("health")
    {
        *h = h.get("state").cloned().unwrap_or(Value::Null);
    }
    Some(v)
}

/// The progress rows of every flow with a checkpoint; `Err` names the file or the
/// record that could not be read.
pub fn progress_batch(flows: &[FlowTables]) -> Result<RecordBatch, String> {
    let schema = progress_schema();
    let mut rows = Vec::new();
    for f in flows {
        let Some(cp) = &f.checkpoint else { continue };
        let path = Checkpoint::at(cp).progress_path();
        let records = read_progress(&path).map_err(|e| e.to_string())?;
        rows.extend(records.iter().filter_map(|r| row(&f.flow, r)));
    }
    let mut decoder = arrow::json::ReaderBuilder::new(schema.clone())
        .build_decoder()
        .map_err(|e| format!("progress records: {e}"))?;
    decoder
        .serialize(&rows)
        .map_err(|e| format!("progress records: {e}"))?;
    match decoder
        .flush()
        .map_err(|e| format!("progress records: {e}"))?
    {
        Some(batch) => Ok(batch),
        None => Ok(RecordBatch::new_empty(schema)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_a_record_lands_in_its_column() {
        let mut p = crate::records::StreamingQueryProgress {
            id: "q".into(),
            run_id: "r".into(),
            name: "f".into(),
            timestamp: "2026-01-01T00:00:10.000Z".into(),
            batch_id: 7,
            batch_duration: 1200,
            num_input_rows: 42,
            ..Default::default()
        };
        p.duration_ms.insert("addBatch".into(), 900);
        p.event_time
            .insert("watermark".into(), "2026-01-01T00:00:00.000Z".into());
        let mut s = crate::records::SourceProgress {
            description: "FileStreamSource[file:///x]".into(),
            end_offset: serde_json::json!({"logOffset": 7}),
            num_input_rows: 42,
            ..Default::default()
        };
        s.metrics.insert("numFilesOutstanding".into(), "3".into());
        p.sources.push(s);
        p.sink.num_output_rows = 40;
        p.weir.delta_version = Some(5);
        p.weir.health = Some(crate::records::Health::default());
        p.weir
            .expectations
            .push(crate::records::ExpectationProgress {
                name: "has_id".into(),
                dataset: "bronze".into(),
                passed_records: 40,
                failed_records: 2,
            });
        p.weir.num_rows_dropped_by_expectations = 2;
        let tmp = tempfile::tempdir().unwrap();
        let cp = tmp.path().join("cp");
        std::fs::create_dir_all(Checkpoint::at(&cp).weir_dir()).unwrap();
        let mut log =
            crate::checkpoint::progress::ProgressLog::open(&Checkpoint::at(&cp).progress_path());
        log.append(&p).unwrap();
        let flows = vec![FlowTables {
            flow: "bronze".into(),
            checkpoint: Some(cp),
            ..Default::default()
        }];
        let batch = progress_batch(&flows).unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.schema(), progress_schema());
        let text = arrow::util::pretty::pretty_format_batches(&[batch])
            .unwrap()
            .to_string();
        for want in [
            "bronze",
            "2026-01-01T00:00:10",
            "| 7 ",
            "{addBatch: 900}",
            "{\"logOffset\":7}",
            "numFilesOutstanding: 3",
            "numOutputRows: 40",
            "deltaVersion: 5",
            "health: healthy",
            "expectations: [{name: has_id, dataset: bronze, passed_records: 40, failed_records: 2}]",
            "numRowsDroppedByExpectations: 2",
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
    }
}
