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
//! `flights`: `dropDuplicates(flight_id, sched_dep)` over `WEIR_BENCH_FLIGHT_KEYS`
//! distinct keys (default 10,000,000; a 6-character flight id such as `UA0042` and a
//! timestamp, 100,000 flights per hour, plus 2% duplicate rows) in `WEIR_BENCH_BATCHES`
//! committed micro-batches generated one at a time (the input never all in memory):
//!
//! - `flights keep-all`: a watermark delay of 10 years, so no key expires and the state
//!   grows to every key, as Spark's `dropDuplicates` without a watermark;
//! - `flights wm 1h`: a 1-hour delay, so the state holds about the last 2 hours of keys.
//!
//! `WEIR_BENCH_STATE_MEMORY_LIMIT` (bytes) sets the flows' `state_memory_limit` in the
//! `flights` cases: the state beyond it spills to disk (docs/state.md).
//!
//! `WEIR_BENCH_CASES` picks cases (comma list of `dedup`, `flights`, `flights-wm`; all by
//! default). Run the large cases one per process for a clean peak RSS.
//!
//! Per case: seconds, state keys, the operator's `memoryUsedBytes` and bytes per key,
//! the keys' own Arrow bytes per key, and the process's peak RSS during the case
//! (`VmHWM` of `/proc/self/status`, reset before each case through `/proc/self/clear_refs`;
//! `null` where the kernel does not allow the reset). The `flights` cases also print the
//! key's raw bytes (characters + 8-byte timestamp) and the state directory's size on disk.

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

/// Key ids `from..to`, every 50th followed by a duplicate of an earlier key (2%).
fn ids_with_duplicates(from: u64, to: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = Vec::new();
    for i in from..to {
        ids.push(i);
        if i % 50 == 49 {
            ids.push(i - 7);
        }
    }
    ids
}

/// Rows for keys `from..to`, every 50th followed by a duplicate of an earlier key.
fn batches(from: u64, to: u64) -> Vec<RecordBatch> {
    ids_with_duplicates(from, to)
        .chunks(8192)
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

fn cases() -> Vec<String> {
    std::env::var("WEIR_BENCH_CASES")
        .unwrap_or_else(|_| "dedup,flights,flights-wm".into())
        .split(',')
        .map(|c| c.trim().to_string())
        .collect()
}

fn flight_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("flight_id", DataType::Utf8, true),
        Field::new(
            "sched_dep",
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("UTC"))),
            true,
        ),
        Field::new("dep_delay", DataType::Int64, true),
    ]))
}

fn flight_spec(delay: &str, limit: Option<u64>) -> StatefulSpec {
    StatefulSpec {
        state_memory_limit: limit,
        flow: "bench".into(),
        watermark: Some(WatermarkSpec::new("sched_dep", delay).expect("delay")),
        drop_duplicates: Some(vec!["flight_id".into(), "sched_dep".into()]),
        output_mode: OutputMode::Append,
        ..Default::default()
    }
}

const FLIGHTS_PER_HOUR: u64 = 100_000;

/// Key `i`: 16 carriers x 6,250 flight numbers per hour (`UA0042`), hours in order.
fn flight_key(i: u64) -> (String, i64) {
    const CARRIERS: [&str; 16] = [
        "UA", "AA", "B6", "DL", "EV", "MQ", "US", "WN", "VX", "FL", "AS", "9E", "F9", "HA", "YV",
        "OO",
    ];
    let within = i % FLIGHTS_PER_HOUR;
    let hour = (i / FLIGHTS_PER_HOUR) as i64;
    (
        format!("{}{:04}", CARRIERS[(within % 16) as usize], within / 16),
        1_356_998_400_000_000 + hour * HOUR_US,
    )
}

/// Rows for flight keys `from..to`, every 50th followed by a duplicate of an earlier key.
fn flight_batches(from: u64, to: u64) -> Vec<RecordBatch> {
    ids_with_duplicates(from, to)
        .chunks(8192)
        .map(|chunk| {
            let keys: Vec<_> = chunk.iter().map(|&i| flight_key(i)).collect();
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| &k.0))),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(keys.iter().map(|k| k.1))
                        .with_timezone("UTC"),
                ),
                Arc::new(Int64Array::from_iter_values(
                    chunk.iter().map(|&i| i as i64),
                )),
            ];
            RecordBatch::try_new(flight_schema(), columns).expect("batch")
        })
        .collect()
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => dirs.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// The `flights` cases: `n` keys in `n_batches` committed micro-batches.
fn flights(case: &str, delay: &str, n: u64, n_batches: u64, limit: Option<u64>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = flight_spec(delay, limit);
    let case = match limit {
        Some(l) => format!("{case}, limit {} MiB", l / 1_048_576),
        None => case.to_string(),
    };
    let delay_ms = spec.watermark.as_ref().expect("watermark").delay_ms;
    let resettable = reset_peak();
    let t = Instant::now();
    let mut op = build(&spec, &flight_schema(), dir.path(), None).expect("operator");
    let per = n.div_ceil(n_batches);
    let mut watermark = i64::MIN / 1000;
    let (mut emitted, mut key_bytes, mut key_rows) = (0u64, 0f64, 0u64);
    for b in 0..n_batches {
        let (from, to) = (b * per, ((b + 1) * per).min(n));
        if from >= to {
            break;
        }
        let input = flight_batches(from, to);
        if b == 0 {
            let rows: usize = input.iter().map(RecordBatch::num_rows).sum();
            key_rows = rows as u64;
            key_bytes = input
                .iter()
                .map(|b| {
                    (0..2)
                        .map(|c| b.column(c).get_array_memory_size())
                        .sum::<usize>()
                })
                .sum::<usize>() as f64;
        }
        let out = op.process(b, input, watermark).expect("batch");
        emitted += out.iter().map(RecordBatch::num_rows).sum::<usize>() as u64;
        drop(out);
        op.commit(b).expect("commit");
        watermark = watermark.max(flight_key(to - 1).1.div_euclid(1000) - delay_ms);
    }
    assert_eq!(emitted, n);
    let secs = t.elapsed().as_secs_f64();
    let m = op.metrics();
    let per_key = m.memory_used_bytes as f64 / m.num_rows_total.max(1) as f64;
    let peak = if resettable { peak_mib() } else { None };
    let spilled = m.custom_metrics.get("numSpilledRows").copied().unwrap_or(0);
    let raw_key = flight_key(0).0.len() + 8;
    println!(
        "{{\"case\":\"{case}\",\"s\":{secs:.2},\"rows_out\":{emitted},\"keys\":{},\"spilled_keys\":{spilled},\"memory_used_mib\":{:.1},\"bytes_per_key\":{per_key:.1},\"key_raw_bytes\":{raw_key},\"key_arrow_bytes\":{:.1},\"state_disk_mib\":{:.1},\"peak_rss_mib\":{}}}",
        m.num_rows_total,
        m.memory_used_bytes as f64 / 1048576.0,
        key_bytes / key_rows.max(1) as f64,
        dir_bytes(dir.path()) as f64 / 1048576.0,
        peak.map_or("null".to_string(), |p| p.to_string())
    );
}

fn main() {
    let cases = cases();
    let n_batches: u64 = std::env::var("WEIR_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
        .max(1);
    let flight_keys: u64 = std::env::var("WEIR_BENCH_FLIGHT_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let limit: Option<u64> = std::env::var("WEIR_BENCH_STATE_MEMORY_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok());
    if cases.iter().any(|c| c == "dedup") {
        dedup(n_batches);
    }
    if cases.iter().any(|c| c == "flights") {
        flights(
            "flights keep-all",
            "3650 days",
            flight_keys,
            n_batches,
            limit,
        );
    }
    if cases.iter().any(|c| c == "flights-wm") {
        flights("flights wm 1h", "1 hour", flight_keys, n_batches, limit);
    }
}

/// The `dedup` cases (see the module docs).
fn dedup(n_batches: u64) {
    let n: u64 = std::env::var("WEIR_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_300_000);
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
