//! Stateful-operator benchmark (`cargo bench --bench state`), one JSON line per case.
//!
//! `dedup`: Spark's `dropDuplicates(carrier, flight, origin, time_hour)` with a 1-day
//! watermark, the demo's silver key, over `WEIR_BENCH_KEYS` distinct keys (default
//! 3,300,000) plus 2% duplicate rows, through the real operator and its state store
//! (a checkpoint directory in a temp dir):
//!
//! - `insert`: one micro-batch with every row (record batches of 8,192 rows), then its
//!   commit (state version 0: delta + snapshot);
//! - `restart`: a new operator loading version 0 (the 1 M-key restart target of issue 16);
//! - `expire`: the no-data batch whose watermark expires every key, then its commit;
//! - `stream`: the same keys in `WEIR_BENCH_BATCHES` micro-batches (default 50), each
//!   committed, the watermark one day behind (the state grows to every key of the day).
//!
//! Per case: seconds, state keys, the operator's `memoryUsedBytes` and bytes per key,
//! the keys' own Arrow bytes per key, and the process's peak RSS during the case
//! (`VmHWM` of `/proc/self/status`, reset before each case through `/proc/self/clear_refs`;
//! `null` where the kernel does not allow the reset).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use weir::ops::stateful::{StatefulOperator, build};
use weir::spec::{OutputMode, StatefulSpec, WatermarkSpec};

const HOUR_US: i64 = 3_600_000_000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("carrier", DataType::Utf8, true),
        Field::new("flight", DataType::Int32, true),
        Field::new("origin", DataType::Utf8, true),
        Field::new(
            "time_hour",
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
            true,
        ),
        Field::new("dep_delay", DataType::Int64, true),
    ]))
}

fn spec() -> StatefulSpec {
    StatefulSpec {
        flow: "bench".into(),
        watermark: Some(WatermarkSpec::new("time_hour", "1 day").expect("delay")),
        drop_duplicates: Some(
            ["carrier", "flight", "origin", "time_hour"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        output_mode: OutputMode::Append,
        ..Default::default()
    }
}

/// Row `i`'s key: 16 carriers, 3 origins, 2,000 flight numbers, one hour per 6,000 keys
/// (about the demo's flights per hour x10), so keys arrive in event-time order.
fn key(i: u64) -> (&'static str, i32, &'static str, i64) {
    const CARRIERS: [&str; 16] = [
        "UA", "AA", "B6", "DL", "EV", "MQ", "US", "WN", "VX", "FL", "AS", "9E", "F9", "HA", "YV",
        "OO",
    ];
    const ORIGINS: [&str; 3] = ["EWR", "JFK", "LGA"];
    let hour = (i / 6_000) as i64;
    let within = i % 6_000;
    (
        CARRIERS[(within % 16) as usize],
        (within / 16 % 2_000) as i32,
        ORIGINS[(within / 16 / 2_000 % 3) as usize],
        1_356_998_400_000_000 + hour * HOUR_US,
    )
}

/// Rows for keys `from..to`, every 50th followed by a duplicate of an earlier key.
fn batches(from: u64, to: u64) -> Vec<RecordBatch> {
    let mut ids: Vec<u64> = Vec::new();
    for i in from..to {
        ids.push(i);
        if i % 50 == 49 {
            ids.push(i - 7);
        }
    }
    ids.chunks(8192)
        .map(|chunk| {
            let keys: Vec<_> = chunk.iter().map(|&i| key(i)).collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.0))),
                Arc::new(Int32Array::from_iter_values(keys.iter().map(|k| k.1))),
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.2))),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(keys.iter().map(|k| k.3))
                        .with_timezone("UTC"),
                ),
                Arc::new(Int64Array::from_iter_values(
                    chunk.iter().map(|&i| i as i64),
                )),
            ];
            RecordBatch::try_new(schema(), columns).expect("batch")
        })
        .collect()
}

/// Arrow bytes of the key columns per key (values and offsets, as in the input).
fn key_bytes_per_row(batches: &[RecordBatch]) -> f64 {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let bytes: usize = batches
        .iter()
        .map(|b| {
            (0..4)
                .map(|c| b.column(c).get_array_memory_size())
                .sum::<usize>()
        })
        .sum();
    bytes as f64 / rows.max(1) as f64
}

fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

fn report(case: &str, secs: f64, op: &dyn StatefulOperator, key_bytes: f64, resettable: bool) {
    let m = op.metrics();
    let per_key = m.memory_used_bytes as f64 / m.num_rows_total.max(1) as f64;
    let peak = if resettable { peak_mib() } else { None };
    println!(
        "{{\"case\":\"dedup {case}\",\"s\":{secs:.2},\"keys\":{},\"memory_used_mib\":{:.1},\"bytes_per_key\":{per_key:.1},\"key_arrow_bytes\":{key_bytes:.1},\"peak_rss_mib\":{}}}",
        m.num_rows_total,
        m.memory_used_bytes as f64 / 1048576.0,
        peak.map_or("null".to_string(), |p| p.to_string())
    );
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_300_000);
    let n_batches: u64 = std::env::var("WEIR_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
        .max(1);
    let wm_ms = |us: i64| us.div_euclid(1000) - 86_400_000;
    let max_us = key(n.saturating_sub(1)).3;

    // One micro-batch with every key.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = batches(0, n);
    let key_bytes = key_bytes_per_row(&input);
    let resettable = reset_peak();
    let t = Instant::now();
    let mut op = build(&spec(), &schema(), dir.path(), None).expect("operator");
    let out = op.process(0, input, i64::MIN / 1000).expect("batch 0");
    assert_eq!(
        out.iter().map(RecordBatch::num_rows).sum::<usize>() as u64,
        n
    );
    drop(out);
    op.commit(0).expect("commit 0");
    report(
        "insert",
        t.elapsed().as_secs_f64(),
        op.as_ref(),
        key_bytes,
        resettable,
    );

    drop(op);
    let resettable = reset_peak();
    let t = Instant::now();
    let mut op = build(&spec(), &schema(), dir.path(), Some(0)).expect("restart");
    report(
        "restart",
        t.elapsed().as_secs_f64(),
        op.as_ref(),
        key_bytes,
        resettable,
    );

    let resettable = reset_peak();
    let t = Instant::now();
    let expire_at = wm_ms(max_us) + 86_400_000 * 2;
    assert!(op.needs_no_data_batch(expire_at));
    op.process(1, Vec::new(), expire_at).expect("batch 1");
    op.commit(1).expect("commit 1");
    report(
        "expire",
        t.elapsed().as_secs_f64(),
        op.as_ref(),
        key_bytes,
        resettable,
    );
    drop(op);
    drop(dir);

    // The same keys over many micro-batches, the watermark a day behind.
    let dir = tempfile::tempdir().expect("tempdir");
    let resettable = reset_peak();
    let t = Instant::now();
    let mut op = build(&spec(), &schema(), dir.path(), None).expect("operator");
    let per = n.div_ceil(n_batches);
    let mut watermark = i64::MIN / 1000;
    for b in 0..n_batches {
        let (from, to) = (b * per, ((b + 1) * per).min(n));
        if from >= to {
            break;
        }
        op.process(b, batches(from, to), watermark).expect("batch");
        op.commit(b).expect("commit");
        watermark = watermark.max(wm_ms(key(to - 1).3));
    }
    report(
        &format!("stream ({n_batches} batches)"),
        t.elapsed().as_secs_f64(),
        op.as_ref(),
        key_bytes,
        resettable,
    );
}
