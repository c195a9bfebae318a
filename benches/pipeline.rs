//! Multi-hop benchmarks (`cargo bench --bench pipeline`), one JSON line per result.
//!
//! - `latency`: end-to-end latency of three hops run concurrently in one process
//!   with `processing_time = "0 seconds"`: JSON files land one at a time in
//!   `landing/` (bronze: files -> Delta), silver streams bronze (Delta -> Delta,
//!   a filter), gold streams silver (Delta -> Delta, a projection). A poller
//!   watches gold's Delta log and records when each landed row becomes visible
//!   there (the first gold version whose data files hold it). Latency = visible -
//!   landed, per file; median, p99 and max over `WEIR_BENCH_FILES` (default 1000)
//!   files landed at `WEIR_BENCH_RATE` files/s (default 20). Bronze uses file
//!   notifications (`use_notifications`); `WEIR_BENCH_LISTING=1` makes it list instead.
//!   Each hop's batches are summarised too (rows per batch, median `durationMs` steps).
//! - `pipeline`: the demo pipeline (bronze flights and weather -> silver with
//!   joins and dedup -> gold hourly windows, flights x weather) with
//!   `available_now` over `$WEIR_BENCH_DIR/flights_x10` (made by the `ingest`
//!   bench), one run; wall time per flow and in total. With `WEIR_BENCH_WORK=DIR` the
//!   run's directory is DIR (new or empty) and kept: the landed input, the dimensions
//!   and weir's tables, for `bench/spark/bench_export.py` to run the exported script on
//!   the same files.
//!
//! `WEIR_BENCH_CASES` (default `latency,pipeline`) selects cases.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use tokio::sync::watch;
use weir::engine::{RunOptions, run_flow};
use weir::pipeline;
use weir::spec::Trigger;

/// `VmHWM` of this process in MiB (peak RSS since start or the last reset).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The 3-hop pipeline, shared with the Spark + Delta figure (`bench/spark/bench_export_latency.py`).
const LATENCY_PIPELINE: &str = include_str!("../bench/spark/latency.toml");

fn main() {
    // As the `weir` binary does: one glibc malloc arena (src/malloc.rs).
    weir::malloc::use_one_arena();
    let cases = std::env::var("WEIR_BENCH_CASES").unwrap_or_else(|_| "latency,pipeline".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if cases.contains("latency") {
        rt.block_on(bench_latency());
    }
    if cases.contains("pipeline") {
        let dir = PathBuf::from(
            std::env::var("WEIR_BENCH_DIR").unwrap_or_else(|_| "/var/tmp/weir-bench-inputs".into()),
        );
        rt.block_on(bench_pipeline(&dir.join("flights_x10")));
    }
}

async fn bench_latency() {
    let files: usize = std::env::var("WEIR_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rate: f64 = std::env::var("WEIR_BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20.0);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir_all(dir.join("landing")).expect("landing");
    std::fs::create_dir_all(dir.join("_staging")).expect("staging");
    let path = dir.join("pipeline.toml");
    // `WEIR_BENCH_LISTING=1`: bronze lists its directory (no file notifications).
    let text = if std::env::var("WEIR_BENCH_LISTING").is_ok_and(|v| v == "1") {
        LATENCY_PIPELINE.replace("use_notifications = true", "")
    } else {
        LATENCY_PIPELINE.to_string()
    };
    std::fs::write(&path, text).expect("pipeline");
    let pipeline = pipeline::load(&path).expect("valid pipeline");
    let (stop_tx, stop_rx) = watch::channel(false);
    // Each flow's batches: their `durationMs` and rows, for the per-hop breakdown.
    let records: Arc<Mutex<BTreeMap<String, Vec<Hop>>>> = Arc::default();
    let mut tasks = Vec::new();
    for flow in pipeline.flows.clone() {
        let stop = stop_rx.clone();
        let records = records.clone();
        tasks.push(tokio::spawn(async move {
            run_flow(
                &flow,
                RunOptions {
                    stop: Some(stop),
                    on_progress: Some(Box::new(move |p| {
                        if let Ok(mut r) = records.lock() {
                            r.entry(p.name.clone()).or_default().push(Hop {
                                rows: p.num_input_rows,
                                durations: p.duration_ms.clone(),
                                batch_id: p.batch_id,
                                ended_ms: now_ms(),
                            });
                        }
                    })),
                    ..Default::default()
                },
            )
            .await
        }));
    }
    // The poller: when each id becomes visible in gold. Every 5 ms it looks for gold's
    // next log entry (`_delta_log/<v+1>.json`, one stat) and only then reads that
    // commit's `add` actions, so the measurement costs the pipeline little CPU whatever
    // the table's size (until 2026-12-03 17:00 UTC it loaded each version incrementally,
    // which re-materialises the table's file list: a cost that grew with the table);
    // `WEIR_BENCH_POLLER=open` opens the whole table every 5 ms instead (the figures
    // recorded before 2026-12-03).
    let open_every_poll = std::env::var("WEIR_BENCH_POLLER").is_ok_and(|p| p == "open");
    let gold = dir.join("lake/gold");
    let (seen_tx, seen_rx) = watch::channel(0usize);
    let poller = tokio::spawn(async move {
        let mut visible: BTreeMap<i64, i64> = BTreeMap::new();
        let mut read_files: HashSet<String> = HashSet::new();
        let mut version = -1i64;
        let mut kept: Option<deltalake::DeltaTable> = None;
        while visible.len() < files {
            tokio::time::sleep(Duration::from_millis(5)).await;
            // Visible from the moment the log entry is there.
            let detected = now_ms();
            let uris: Vec<String> = if open_every_poll {
                let Ok(Some(table)) = weir::delta::open_existing(&gold).await else {
                    continue;
                };
                let v = table.version().map_or(-1, |v| v as i64);
                if v == version {
                    continue;
                }
                version = v;
                match table.get_file_uris() {
                    Ok(u) => u.collect(),
                    Err(_) => continue,
                }
            } else {
                // The new commit's `add` actions, read through deltalake's log store (one
                // read per version, as the Delta source reads new commits).
                let next = gold
                    .join("_delta_log")
                    .join(format!("{:020}.json", version + 1));
                if !next.exists() {
                    continue;
                }
                if kept.is_none() {
                    kept = weir::delta::open_existing(&gold).await.ok().flatten();
                }
                let Some(table) = kept.as_ref() else {
                    continue;
                };
                let Ok(Some(bytes)) = table
                    .log_store()
                    .read_commit_entry((version + 1) as u64)
                    .await
                else {
                    continue;
                };
                let Ok(actions) = deltalake::logstore::get_actions((version + 1) as u64, &bytes)
                else {
                    continue;
                };
                version += 1;
                actions
                    .into_iter()
                    .filter_map(|a| match a {
                        deltalake::kernel::Action::Add(add) => {
                            Some(gold.join(&add.path).display().to_string())
                        }
                        _ => None,
                    })
                    .collect()
            };
            let at = if open_every_poll { now_ms() } else { detected };
            for uri in uris {
                if !read_files.insert(uri.clone()) {
                    continue;
                }
                let path = url::Url::parse(&uri)
                    .ok()
                    .and_then(|u| u.to_file_path().ok())
                    .unwrap_or_else(|| PathBuf::from(&uri));
                let Ok(file) = std::fs::File::open(&path) else {
                    continue;
                };
                let Ok(reader) =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .and_then(|b| b.build())
                else {
                    continue;
                };
                for batch in reader.flatten() {
                    let Some(ids) = batch.column_by_name("id") else {
                        continue;
                    };
                    let Some(landed) = batch.column_by_name("landed_ms") else {
                        continue;
                    };
                    let ids = ids.as_primitive::<Int64Type>();
                    let landed = landed.as_primitive::<Int64Type>();
                    for i in 0..ids.len() {
                        if !ids.is_null(i) {
                            visible.insert(ids.value(i), at - landed.value(i));
                        }
                    }
                }
            }
            let _ = seen_tx.send(visible.len());
        }
        visible
    });
    // Land the files at the requested rate.
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.01));
    let started = Instant::now();
    for i in 0..files {
        let due = started + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let name = format!("e{i:06}.json");
        let body = format!(
            "{{\"id\":{i},\"landed_ms\":{},\"payload\":\"x\"}}\n",
            now_ms()
        );
        let tmp = dir.join("_staging").join(&name);
        std::fs::write(&tmp, body).expect("write");
        std::fs::rename(&tmp, dir.join("landing").join(&name)).expect("rename");
    }
    let mut seen = seen_rx.clone();
    let wait = tokio::time::timeout(Duration::from_secs(120), async {
        while *seen.borrow() < files {
            if seen.changed().await.is_err() {
                break;
            }
        }
    })
    .await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let visible = match (wait, poller.await) {
        (Ok(()), Ok(v)) => v,
        _ => {
            println!(
                "{{\"case\":\"latency\",\"error\":\"not every file became visible within 120 s\"}}"
            );
            return;
        }
    };
    let mut lat: Vec<i64> = visible.values().copied().collect();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{{\"case\":\"latency (3 hops, processing_time 0)\",\"files\":{},\"rate_files_per_s\":{rate},\"median_ms\":{},\"p90_ms\":{},\"p99_ms\":{},\"max_ms\":{}}}",
        lat.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        lat[lat.len() - 1]
    );
    // Per hop: batches, rows per batch and the median of each step (ms, Spark's durationMs).
    let records = records.lock().map(|r| r.clone()).unwrap_or_default();
    // `WEIR_BENCH_TRACE=FILE`: every id's latency and every batch's durations, as JSON
    // lines, to see where a tail comes from.
    if let Some(trace) = std::env::var_os("WEIR_BENCH_TRACE") {
        let mut out = String::new();
        for (id, ms) in &visible {
            out.push_str(&format!("{{\"id\":{id},\"latency_ms\":{ms}}}\n"));
        }
        for (flow, hops) in &records {
            for h in hops {
                out.push_str(&format!(
                    "{{\"flow\":\"{flow}\",\"batch_id\":{},\"rows\":{},\"ended_ms\":{},\"durationMs\":{}}}\n",
                    h.batch_id,
                    h.rows,
                    h.ended_ms,
                    serde_json::to_string(&h.durations).unwrap_or_default()
                ));
            }
        }
        std::fs::write(trace, out).expect("WEIR_BENCH_TRACE");
    }
    for (flow, hops) in &records {
        let median = |f: &dyn Fn(&Hop) -> u64| {
            let mut v: Vec<u64> = hops.iter().map(f).collect();
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        let rows: u64 = hops.iter().map(|h| h.rows).sum();
        let steps: Vec<String> = [
            "latestOffset",
            "walCommit",
            "getBatch",
            "addBatch",
            "commitOffsets",
            "triggerExecution",
        ]
        .iter()
        .map(|k| {
            format!(
                "\"{k}\":{}",
                median(&|h| h.durations.get(*k).copied().unwrap_or(0))
            )
        })
        .collect();
        println!(
            "{{\"case\":\"latency per hop\",\"flow\":\"{flow}\",\"batches\":{},\"rows_per_batch\":{:.2},\"median_duration_ms\":{{{}}}}}",
            hops.len(),
            rows as f64 / hops.len().max(1) as f64,
            steps.join(",")
        );
    }
}

/// One batch of a hop, from its progress record.
#[derive(Clone)]
struct Hop {
    rows: u64,
    durations: BTreeMap<String, u64>,
    batch_id: u64,
    /// When the progress record arrived (ms since the epoch).
    ended_ms: i64,
}

async fn bench_pipeline(input: &Path) {
    let Ok(entries) = std::fs::read_dir(input) else {
        println!(
            "{{\"case\":\"pipeline\",\"skipped\":\"no input at {} (run the ingest bench first)\"}}",
            input.display()
        );
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = match std::env::var_os("WEIR_BENCH_WORK") {
        Some(work) => {
            let work = PathBuf::from(work);
            std::fs::create_dir_all(&work).expect("WEIR_BENCH_WORK");
            let empty = std::fs::read_dir(&work).is_ok_and(|mut d| d.next().is_none());
            assert!(
                empty,
                "WEIR_BENCH_WORK={} must be a new or empty directory",
                work.display()
            );
            work
        }
        None => tmp.path().to_path_buf(),
    };
    weir::demo::data::prepare(&dir, Some(0)).expect("prepare");
    // The demo's layout, with flights x10 (weekly files) as the flights landing directory.
    let landing = dir.join("landing/flights/x10");
    std::fs::create_dir_all(&landing).expect("landing");
    let mut bytes = 0u64;
    for e in entries.flatten() {
        let target = landing.join(e.file_name());
        bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
        std::fs::hard_link(e.path(), &target)
            .or_else(|_| std::fs::copy(e.path(), &target).map(|_| ()))
            .expect("link input");
    }
    weir::demo::data::land_weather(&dir.join("landing/weather"), &dir.join("_staging"), None)
        .expect("weather");
    let pipeline = pipeline::load(&dir.join("pipeline.toml")).expect("demo pipeline");
    let started = Instant::now();
    let mut flows = Vec::new();
    for flow in weir::spec::dependency_order(&pipeline.flows).expect("order") {
        // Peak RSS per flow: VmHWM, reset before each flow (null where the kernel refuses).
        let resettable = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let t = Instant::now();
        let summary = run_flow(
            &flow,
            RunOptions {
                trigger: Some(Trigger::AvailableNow),
                ..Default::default()
            },
        )
        .await
        .expect("flow runs");
        let secs = t.elapsed().as_secs_f64();
        let peak = if resettable { peak_rss_mib() } else { None };
        flows.push(format!(
            "{{\"flow\":{:?},\"input_rows\":{},\"output_rows\":{},\"batches\":{},\"s\":{secs:.2},\"rows_per_s\":{:.0},\"peak_rss_mib\":{}}}",
            flow.name,
            summary.num_input_rows,
            summary.num_output_rows,
            summary.batches,
            summary.num_input_rows as f64 / secs.max(1e-9),
            peak.map_or("null".to_string(), |p| format!("{p:.0}"))
        ));
    }
    let total = started.elapsed().as_secs_f64();
    println!(
        "{{\"case\":\"pipeline (demo, flights x10, available_now)\",\"input_bytes\":{bytes},\"total_s\":{total:.2},\"flows\":[{}]}}",
        flows.join(",")
    );
}
