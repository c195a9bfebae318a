//! Where a one-row Delta append's time goes, and what a Delta source's refresh costs
//! (BENCHMARKS.md "Multi-hop latency"). `cargo bench --bench delta_commit`.
//!
//! Appends `WEIR_BENCH_COMMITS` (default 400) one-row batches to a new table through
//! weir's durable store (fsyncs included), each with a txn, as a Delta sink does with
//! delta-rs's `DeltaWriter` and `CommitBuilder`, timing the phases: the Parquet file, the
//! prepared commit, the log entry, deltalake's post-commit (snapshot update, checkpoint
//! every 100 versions, log cleanup). After each commit a second handle refreshes: the log
//! listing (`LogStore::get_latest_version`, what the Delta source does now) and
//! `update_incremental` (deltalake's snapshot update). Medians over the second half of the
//! commits, in ms; post-commit also by distance from the last checkpoint. One JSON line.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TableReference};
use deltalake::kernel::{Action, Transaction};
use deltalake::operations::write::WriterStatsConfig;
use deltalake::operations::write::writer::{DeltaWriter, WriterConfig};
use deltalake::protocol::{DeltaOperation, SaveMode};

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let commits: i64 = std::env::var("WEIR_BENCH_COMMITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    let row = |i: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![i])),
                Arc::new(StringArray::from(vec!["x"])),
            ],
        )
        .expect("batch")
    };
    let mut table = weir::delta::open_table(&path).await.expect("open");
    table = table.write(vec![row(0)]).await.expect("create");
    let mut reader = weir::delta::open_table(&path).await.expect("open reader");
    let (mut file, mut prepare, mut log, mut post) = (vec![], vec![], vec![], vec![]);
    let mut post_by_distance: [Vec<f64>; 4] = Default::default();
    let (mut listing, mut update) = (vec![], vec![]);
    for i in 1..commits {
        let measured = i > commits / 2;
        let t = Instant::now();
        let state = table.snapshot().expect("snapshot");
        let stats = WriterStatsConfig::from_config(state.snapshot().table_configuration());
        let config = WriterConfig::new(
            state.snapshot().arrow_schema(),
            vec![],
            None,
            None,
            None,
            stats.num_indexed_cols,
            stats.stats_columns,
        );
        let mut writer = DeltaWriter::new(table.log_store().object_store(None), config);
        writer.write(&row(i)).await.expect("write");
        let adds = writer.close().await.expect("close");
        let t1 = Instant::now();
        let prepared = CommitBuilder::from(
            CommitProperties::default().with_application_transaction(Transaction::new("q", i)),
        )
        .with_actions(adds.into_iter().map(Action::Add).collect())
        .build(
            Some(state as &dyn TableReference),
            table.log_store(),
            DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: None,
                predicate: None,
            },
        )
        .into_prepared_commit_future()
        .await
        .expect("prepare");
        let t2 = Instant::now();
        let post_commit = prepared.await.expect("commit");
        let t3 = Instant::now();
        let finalized = post_commit.await.expect("post-commit");
        table.state = Some(finalized.snapshot);
        if measured {
            file.push((t1 - t).as_secs_f64() * 1e3);
            prepare.push((t2 - t1).as_secs_f64() * 1e3);
            log.push((t3 - t2).as_secs_f64() * 1e3);
            post.push(ms(t3));
        }
        post_by_distance[((i % 100) / 25) as usize].push(ms(t3));

        let t = Instant::now();
        let known = reader.version().expect("reader version");
        let latest = reader
            .log_store()
            .get_latest_version(known)
            .await
            .expect("listing");
        assert_eq!(latest as i64, i, "the listing sees the new commit");
        let listed = ms(t);
        let t = Instant::now();
        reader.update_incremental(None).await.expect("update");
        if measured {
            listing.push(listed);
            update.push(ms(t));
        }
    }
    let [d0, d1, d2, d3] = post_by_distance;
    println!(
        "{}",
        serde_json::json!({
            "case": "one-row Delta append and refresh",
            "commits": commits,
            "median_ms": {
                "parquet_file": median(file),
                "prepare_commit": median(prepare),
                "log_entry": median(log),
                "post_commit": median(post),
                "refresh_listing": median(listing),
                "refresh_update_incremental": median(update),
            },
            "post_commit_median_ms_by_commits_after_checkpoint": {
                "0-24": median(d0), "25-49": median(d1), "50-74": median(d2), "75-99": median(d3),
            },
        })
    );
}
