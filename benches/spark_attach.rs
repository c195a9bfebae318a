//! `weir attach --spark` on a big query: a checkpoint of 100,000 batches and a
//! rolling zstd event log of 100,000 `QueryProgressEvent`s (Spark 4.3's
//! shapes, generated once under `$WEIR_BENCH_INPUTS/spark-attach`, default
//! `/var/tmp/weir-bench-inputs`). Drives the real release binary in tmux and
//! reports, as JSON lines:
//!
//! - `first_frame_ms`: from the start of `weir attach` to the first screen showing
//!   the query (its name, from the log's `QueryStartedEvent`) and the checkpoint's
//!   last batch id (the checkpoint listed); the rest of the log's history may still
//!   be loading (`loading_at_first_frame`: the screen said `loading event log N%`);
//! - `history_loaded_ms`: from the start to a screen with the whole log applied
//!   (no `loading event log` any more, the last batch shown, the health verdict made);
//! - `peak_rss_mb`: the process's peak resident memory (`VmHWM`) after that;
//! - `follow_cpu_pct`: the process's CPU (user + system, `/proc/<pid>/stat`)
//!   over `WEIR_BENCH_FOLLOW_SECS` (default 60) while this bench appends one
//!   batch per second to the log (a progress event plus job, SQL and task
//!   events, flushed as Spark flushes them) and to the checkpoint.
//!
//! Cases: `progress` (the log holds only streaming events: the 100,000
//! progress events of the task) and `mixed` (each batch also has the job, SQL
//! plan and task events a real log carries, about 8 KB per batch).
//!
//! `cargo bench --bench spark_attach` (needs tmux). `WEIR_BENCH_BATCHES` (default
//! 100000) sizes the inputs (a quick check in debug: `WEIR_BENCH_BATCHES=2000
//! WEIR_BENCH_FOLLOW_SECS=5 cargo bench --profile dev --bench spark_attach`);
//! `WEIR_BENCH_CASES` picks the cases (default `progress,mixed`); `WEIR_BENCH_BIN`
//! measures another weir binary (e.g. a copy of a release build kept aside, when the
//! shared target's `release/weir` may be replaced by another build meanwhile).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Batches of the inputs: `WEIR_BENCH_BATCHES`, default 100,000.
fn batches() -> u64 {
    std::env::var("WEIR_BENCH_BATCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}
const QUERY_ID: &str = "9aea4676-078e-44fa-af0a-3733616841f3";
const RUN_ID: &str = "b874878b-0fc0-4fae-a325-dbb4ed6db959";
const APP: &str = "local-1796000000000";
const T0: i64 = 1_796_000_000_000;
/// Spark rolls event logs at 128 MiB (`spark.eventLog.rolling.maxFileSize`).
const ROLL: usize = 128 << 20;

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn progress_event(batch: u64) -> String {
    let ts = T0 + batch as i64 * 1000;
    let wm = ts - 10_000;
    let rows = 20 + batch % 7;
    format!(
        concat!(
            r#"{{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent","progress":{{"id":"{q}","runId":"{r}","name":"rate_window","timestamp":"{ts}","batchId":{b},"batchDuration":535,"durationMs":{{"triggerExecution":535,"queryPlanning":35,"getBatch":0,"commitOffsets":54,"latestOffset":0,"addBatch":405,"walCommit":38}},"#,
            r#""eventTime":{{"min":"{min}","avg":"{avg}","watermark":"{wm}","max":"{max}"}},"#,
            r#""stateOperators":[{{"operatorName":"stateStoreSave","numRowsTotal":9,"numRowsUpdated":3,"allUpdatesTimeMs":53,"numRowsRemoved":3,"allRemovalsTimeMs":61,"commitTimeMs":97,"memoryUsedBytes":4720,"numRowsDroppedByWatermark":0,"numShufflePartitions":2,"numStateStoreInstances":2,"customMetrics":{{"stateOnCurrentVersionSizeBytes":2696,"forceSnapshotCount":0,"loadedMapCacheMissCount":0,"SnapshotLastUploaded.partition_0_default":-1,"loadedMapCacheHitCount":32,"SnapshotLastUploaded.partition_1_default":-1,"numSnapshotsAutoRepaired":0}},"snapshotCustomMetricNames":["stateOnCurrentVersionSizeBytes","SnapshotLastUploaded.partition_0_default","SnapshotLastUploaded.partition_1_default"]}}],"#,
            r#""sources":[{{"description":"RateStreamV2[rowsPerSecond=20, rampUpTimeSeconds=0, numPartitions=2","startOffset":"{s}","endOffset":"{e}","latestOffset":"{e}","numInputRows":{rows},"inputRowsPerSecond":20.0,"processedRowsPerSecond":74.76635514018692,"metrics":{{}}}}],"#,
            r#""sink":{{"description":"MemorySink","numOutputRows":3,"metrics":{{}}}},"observedMetrics":{{}}}}}}"#,
            "\n"
        ),
        q = QUERY_ID,
        r = RUN_ID,
        ts = iso(ts),
        b = batch,
        min = iso(ts - 3_000),
        avg = iso(ts - 2_000),
        max = iso(ts - 1_000),
        wm = iso(wm),
        s = batch * 2,
        e = batch * 2 + 2,
        rows = rows,
    )
}

/// The job, SQL plan and task events of a batch (a real log's bulk), about 8 KB.
fn other_events(batch: u64) -> String {
    let ts = T0 + batch as i64 * 1000;
    let plan = "WriteToDataSourceV2 MicroBatchWrite[epoch: N, writer: MemoryStreamingWrite] +- *(4) HashAggregate(keys=[window#1], functions=[count(1)]) ".repeat(20);
    let mut out = format!(
        "{{\"Event\":\"org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart\",\"executionId\":{batch},\"description\":\"rate_window\",\"details\":\"\",\"physicalPlanDescription\":\"{plan}\",\"time\":{ts}}}\n\
         {{\"Event\":\"SparkListenerJobStart\",\"Job ID\":{batch},\"Submission Time\":{ts},\"Stage Infos\":[],\"Stage IDs\":[{batch}],\"Properties\":{{\"sql.streaming.queryId\":\"{QUERY_ID}\",\"streaming.sql.batchId\":\"{batch}\"}}}}\n"
    );
    for task in 0..4 {
        out.push_str(&format!(
            "{{\"Event\":\"SparkListenerTaskEnd\",\"Stage ID\":{batch},\"Task Type\":\"ResultTask\",\"Task End Reason\":{{\"Reason\":\"Success\"}},\"Task Info\":{{\"Task ID\":{},\"Launch Time\":{ts},\"Executor ID\":\"driver\",\"Host\":\"localhost\",\"Finish Time\":{}}},\"Task Metrics\":{{\"Executor Run Time\":40,\"Executor CPU Time\":31000000,\"Result Size\":4000,\"JVM GC Time\":0,\"Shuffle Read Metrics\":{{\"Remote Blocks Fetched\":0,\"Local Blocks Fetched\":2,\"Fetch Wait Time\":0,\"Remote Bytes Read\":0,\"Local Bytes Read\":230,\"Total Records Read\":4}},\"Input Metrics\":{{\"Bytes Read\":0,\"Records Read\":0}}}}}}\n",
            batch * 4 + task,
            ts + 40
        ));
    }
    out.push_str(&format!(
        "{{\"Event\":\"SparkListenerJobEnd\",\"Job ID\":{batch},\"Completion Time\":{},\"Job Result\":{{\"Result\":\"JobSucceeded\"}}}}\n\
         {{\"Event\":\"org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd\",\"executionId\":{batch},\"time\":{}}}\n",
        ts + 500,
        ts + 510
    ));
    out
}

struct Log {
    dir: PathBuf,
    seq: u32,
    written: usize,
    enc: zstd::stream::write::Encoder<'static, std::fs::File>,
}

impl Log {
    fn file(dir: &Path, seq: u32) -> std::fs::File {
        std::fs::File::create(dir.join(format!("events_{seq}_{APP}.zstd"))).unwrap()
    }

    fn create(dir: &Path) -> Log {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(format!("appstatus_{APP}.inprogress")), "").unwrap();
        let mut log = Log {
            dir: dir.to_path_buf(),
            seq: 1,
            written: 0,
            enc: zstd::stream::write::Encoder::new(Self::file(dir, 1), 1).unwrap(),
        };
        log.write(&format!(
            "{{\"Event\":\"SparkListenerLogStart\",\"Spark Version\":\"4.3.0\"}}\n{{\"Event\":\"SparkListenerApplicationStart\",\"App Name\":\"bench\",\"App ID\":\"{APP}\",\"Timestamp\":{T0},\"User\":\"bench\"}}\n{{\"Event\":\"org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent\",\"id\":\"{QUERY_ID}\",\"runId\":\"{RUN_ID}\",\"name\":\"rate_window\",\"timestamp\":\"{}\",\"jobTags\":[]}}\n",
            iso(T0)
        ));
        log
    }

    fn write(&mut self, text: &str) {
        if self.written + text.len() > ROLL {
            let enc = std::mem::replace(
                &mut self.enc,
                zstd::stream::write::Encoder::new(Self::file(&self.dir, self.seq + 1), 1).unwrap(),
            );
            enc.finish().unwrap();
            self.seq += 1;
            self.written = 0;
        }
        self.enc.write_all(text.as_bytes()).unwrap();
        self.written += text.len();
    }

    fn flush(&mut self) {
        self.enc.flush().unwrap();
    }
}

fn write_batch_files(cp: &Path, batch: u64) {
    let ts = T0 + batch as i64 * 1000;
    std::fs::write(
        cp.join("offsets").join(batch.to_string()),
        format!(
            "v1\n{{\"batchWatermarkMs\":{},\"batchTimestampMs\":{ts},\"conf\":{{\"spark.sql.shuffle.partitions\":\"2\"}}}}\n{}",
            ts - 10_000,
            batch * 2 + 2
        ),
    )
    .unwrap();
    std::fs::write(
        cp.join("commits").join(batch.to_string()),
        format!("v1\n{{\"nextBatchWatermarkMs\":{}}}", ts - 9_000),
    )
    .unwrap();
}

/// Generates (once) the checkpoint and the event log of a case; returns (checkpoint, log dir).
fn inputs(case: &str) -> (PathBuf, PathBuf) {
    let root = PathBuf::from(
        std::env::var("WEIR_BENCH_INPUTS").unwrap_or_else(|_| "/var/tmp/weir-bench-inputs".into()),
    )
    .join("spark-attach")
    .join(format!("{case}-{}", batches()));
    let cp = root.join("checkpoint");
    let logs = root.join("events");
    if root.join("READY").exists() {
        return (cp, logs);
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(cp.join("offsets")).unwrap();
    std::fs::create_dir_all(cp.join("commits")).unwrap();
    std::fs::create_dir_all(cp.join("sources/0")).unwrap();
    std::fs::write(cp.join("metadata"), format!("{{\"id\":\"{QUERY_ID}\"}}")).unwrap();
    std::fs::write(cp.join("sources/0/0"), format!("v1\n{T0}")).unwrap();
    let started = Instant::now();
    let mut log = Log::create(&logs.join(format!("eventlog_v2_{APP}")));
    for b in 0..batches() {
        write_batch_files(&cp, b);
        if case == "mixed" {
            log.write(&other_events(b));
        }
        log.write(&progress_event(b));
    }
    log.enc.finish().unwrap();
    std::fs::write(root.join("READY"), "").unwrap();
    eprintln!(
        "generated {case}: {} batches in {:.1} s",
        batches(),
        started.elapsed().as_secs_f64()
    );
    (cp, logs)
}

fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields after the command: state is 0, utime is 11, stime is 12.
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

fn weir_pid(socket: &str) -> Option<u32> {
    let shell: u32 = tmux(socket, &["display-message", "-p", "-t", "b", "#{pane_pid}"])
        .trim()
        .parse()
        .ok()?;
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn run(case: &str) {
    let (cp, logs) = inputs(case);
    let batches = batches();
    let follow_secs: u64 = std::env::var("WEIR_BENCH_FOLLOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    // A live query's log was written seconds ago (inputs generated by an earlier run are
    // older than `--stale-after`, which would show the query as lost).
    if let Ok(entries) = std::fs::read_dir(logs.join(format!("eventlog_v2_{APP}"))) {
        for e in entries.flatten() {
            if let Ok(f) = std::fs::File::options().append(true).open(e.path()) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
        }
    }
    let bin = std::env::var("WEIR_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_weir").into());
    let socket = format!("weir-bench-spark-{}", std::process::id());
    let started = Instant::now();
    let ok = Command::new("tmux")
        .args([
            "-L",
            &socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "b",
            "-x",
            "120",
            "-y",
            "40",
        ])
        .args(["-e", "LANG=C.UTF-8"])
        .arg(format!(
            "{bin} attach --spark {} --event-log {}; sleep 600",
            cp.display(),
            logs.display()
        ))
        .status()
        .unwrap();
    assert!(ok.success());
    let last = (batches - 1).to_string();
    let (first_frame, loading_at_first) = loop {
        let screen = tmux(&socket, &["capture-pane", "-p", "-t", "b"]);
        if screen.contains(&last) && screen.contains("rate_window") {
            break (started.elapsed(), screen.contains("loading event log"));
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no frame with batch {last}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let history_loaded = loop {
        let screen = tmux(&socket, &["capture-pane", "-p", "-t", "b"]);
        if screen.contains(&last)
            && screen.contains("rate_window")
            && !screen.contains("loading event log")
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the history never finished loading:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = weir_pid(&socket).expect("weir's pid");
    let rss_mb = proc_field(pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    // Follow: one batch per second, appended to the log (flushed) and the checkpoint.
    let mut log = Log {
        dir: logs.join(format!("eventlog_v2_{APP}")),
        seq: 1000,
        written: 0,
        enc: zstd::stream::write::Encoder::new(
            std::fs::File::create(logs.join(format!("eventlog_v2_{APP}/events_1000_{APP}.zstd")))
                .unwrap(),
            1,
        )
        .unwrap(),
    };
    let ticks0 = cpu_ticks(pid);
    let t0 = Instant::now();
    for i in 0..follow_secs {
        let b = batches + i;
        write_batch_files(&cp, b);
        log.write(&other_events(b));
        log.write(&progress_event(b));
        log.flush();
        std::thread::sleep(Duration::from_secs(1));
    }
    let secs = t0.elapsed().as_secs_f64();
    let ticks = cpu_ticks(pid) - ticks0;
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(100.0);
    let cpu_pct = ticks as f64 / hz / secs * 100.0;
    let rss_after_mb = proc_field(pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0;
    let screen = tmux(&socket, &["capture-pane", "-p", "-t", "b"]);
    let followed = screen.contains(&(batches + follow_secs - 2).to_string())
        || screen.contains(&(batches + follow_secs - 1).to_string());
    let _ = tmux(&socket, &["kill-server"]);
    // Leave the inputs as generated for the next run.
    let _ = log.enc.finish();
    let _ = std::fs::remove_file(logs.join(format!("eventlog_v2_{APP}/events_1000_{APP}.zstd")));
    for i in 0..follow_secs {
        let _ = std::fs::remove_file(cp.join("offsets").join((batches + i).to_string()));
        let _ = std::fs::remove_file(cp.join("commits").join((batches + i).to_string()));
    }
    let log_bytes: u64 = std::fs::read_dir(logs.join(format!("eventlog_v2_{APP}")))
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "{}",
        serde_json::json!({
            "case": format!("spark_attach_{case}"),
            "batches": batches,
            "event_log_bytes": log_bytes,
            "first_frame_ms": first_frame.as_millis() as u64,
            "loading_at_first_frame": loading_at_first,
            "history_loaded_ms": history_loaded.as_millis() as u64,
            "peak_rss_mb": (rss_mb * 10.0).round() / 10.0,
            "peak_rss_after_follow_mb": (rss_after_mb * 10.0).round() / 10.0,
            "follow_secs": follow_secs,
            "follow_cpu_pct": (cpu_pct * 100.0).round() / 100.0,
            "followed_live_batches": followed,
        })
    );
}

fn main() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("spark_attach bench: tmux is needed");
        return;
    }
    let cases = std::env::var("WEIR_BENCH_CASES").unwrap_or_else(|_| "progress,mixed".into());
    for case in cases.split(',').filter(|c| !c.is_empty()) {
        run(case);
    }
}
