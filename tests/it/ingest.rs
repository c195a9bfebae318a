//! End to end on the real nycflights13 flights: every row exactly once, `NA`
//! as null, increments add exactly their rows, a run with nothing new commits
//! nothing. Oracles: DataFusion's own CSV reader over the original file, and a
//! second reader of the Delta table (its parquet files read directly).

use std::io::Read;
use std::path::Path;

use datafusion::prelude::{CsvReadOptions, SessionContext};
use weir::engine::{RunOptions, run_flow};

use crate::support::*;

const KEY: &str = "year, month, day, flight, carrier, sched_dep_time";

/// Per-column NA counts and per-carrier totals computed by DataFusion from the raw CSV.
async fn oracle(dir: &Path) -> (Vec<i64>, Vec<arrow::record_batch::RecordBatch>) {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(weir::demo::data::FLIGHTS_CSV_GZ)
        .read_to_end(&mut text)
        .unwrap();
    let raw = dir.join("raw_flights.csv");
    std::fs::write(&raw, text).unwrap();
    let schema = raw_flights_schema();
    let ctx = SessionContext::new();
    ctx.register_csv(
        "raw",
        raw.to_str().unwrap(),
        CsvReadOptions::new().has_header(true).schema(&schema),
    )
    .await
    .unwrap();
    let nas = ctx
        .sql(
            "SELECT count(*), count(*) FILTER (WHERE dep_time = 'NA'), \
             count(*) FILTER (WHERE arr_delay = 'NA'), count(*) FILTER (WHERE tailnum = 'NA') \
             FROM raw",
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let nas: Vec<i64> = (0..4)
        .map(|i| {
            let c =
                arrow::compute::cast(nas[0].column(i), &arrow::datatypes::DataType::Int64).unwrap();
            arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(&c).value(0)
        })
        .collect();
    let per_carrier = ctx
        .sql("SELECT carrier, count(*) AS n FROM raw GROUP BY carrier ORDER BY carrier")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    (nas, per_carrier)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flights_land_in_delta_exactly_once_incrementally() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let landing = dir.join("landing/flights");
    let staging = dir.join("_staging");
    let pipeline_path = write_pipeline(dir, &flights_pipeline(40));
    let pipeline = weir::pipeline::load(&pipeline_path).unwrap();
    let flow = &pipeline.flows[0];
    let table = dir.join("lake/bronze/flights");

    // January first.
    let january = weir::demo::data::land_flights(&landing, &staging, Some(31)).unwrap();
    assert_eq!(january.files_total, 31);
    let first = run_flow(flow, RunOptions::default()).await.unwrap();
    assert_eq!(first.num_input_rows, january.rows_total);
    assert_eq!(first.num_files, 31);
    assert_eq!(
        num_rows(&delta_rows(&table).await) as u64,
        january.rows_total
    );

    // The rest of the year lands: exactly its rows are added.
    let year = weir::demo::data::land_flights(&landing, &staging, None).unwrap();
    assert_eq!(year.rows_total, 336_776);
    assert_eq!(year.files_total, 365);
    let second = run_flow(flow, RunOptions::default()).await.unwrap();
    assert_eq!(second.num_input_rows, year.rows_total - january.rows_total);
    assert_eq!(second.num_files, 334);
    assert_eq!(
        second.batches,
        334_u64.div_ceil(40),
        "bounded by max_files_per_trigger"
    );

    // Nothing new: no batch, no Delta commit.
    let version = delta_version(&table).await;
    let third = run_flow(flow, RunOptions::default()).await.unwrap();
    assert_eq!(third.batches, 0);
    assert_eq!(delta_version(&table).await, version);

    // Second reader of the table against DataFusion's reading of the raw CSV.
    let rows = delta_rows(&table).await;
    assert_eq!(num_rows(&rows), 336_776);
    let distinct = sql(
        &rows,
        &format!("SELECT count(*) FROM (SELECT DISTINCT {KEY} FROM t)"),
    )
    .await;
    assert_eq!(scalar(&distinct), 336_776, "no duplicate flight keys");
    let (nas, per_carrier) = oracle(dir).await;
    assert_eq!(nas[0], 336_776);
    let ours = sql(
        &rows,
        "SELECT count(*), count(*) FILTER (WHERE dep_time IS NULL), \
         count(*) FILTER (WHERE arr_delay IS NULL), count(*) FILTER (WHERE tailnum IS NULL) FROM t",
    )
    .await;
    for (i, expected) in nas.iter().enumerate() {
        let c =
            arrow::compute::cast(ours[0].column(i), &arrow::datatypes::DataType::Int64).unwrap();
        let got = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(&c).value(0);
        assert_eq!(
            got, *expected,
            "column {i} of (rows, dep_time NA, arr_delay NA, tailnum NA)"
        );
    }
    assert_eq!(
        nas[1], 8255,
        "known: 8,255 cancelled flights have no dep_time"
    );
    let ours_carrier = sql(
        &rows,
        "SELECT carrier, count(*) AS n FROM t GROUP BY carrier ORDER BY carrier",
    )
    .await;
    assert_eq!(
        column_strings(&ours_carrier, "n"),
        column_strings(&per_carrier, "n")
    );
    assert_eq!(
        column_strings(&ours_carrier, "carrier"),
        column_strings(&per_carrier, "carrier")
    );
    // Lineage columns and nothing rescued.
    let lineage = sql(
        &rows,
        "SELECT count(*) FILTER (WHERE source_file LIKE 'file:/%flights_2013-%.csv' AND source_file NOT LIKE 'file://%'), \
         count(*) FILTER (WHERE ingested_at IS NOT NULL), count(_rescued_data) FROM t",
    )
    .await;
    let l: Vec<String> = (0..3)
        .map(|i| column_strings(&lineage, &lineage[0].schema().field(i).name().clone())[0].clone())
        .collect();
    assert_eq!(l, vec!["336776", "336776", "0"]);
    let ts = sql(&rows, "SELECT min(time_hour) FROM t").await;
    assert!(
        column_strings(&ts, ts[0].schema().field(0).name())[0].starts_with("2013-01-01T10:00:00")
    );

    // The ledger and checkpoint agree.
    let inspection = weir::checkpoint_tools::inspect::inspect(&flow.checkpoint)
        .await
        .unwrap();
    assert_eq!(inspection.ledger.as_ref().unwrap().files_committed, 365);
    assert_eq!(inspection.pending_batch_id, None);
    assert_eq!(
        inspection.last_committed_batch_id,
        Some(first.batches + second.batches - 1)
    );
    assert!(inspection.problems.is_empty(), "{:?}", inspection.problems);
}
