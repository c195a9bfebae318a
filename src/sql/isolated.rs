//! Queries in a child process (issue #47, item 2): one memory limit covers everything a
//! query allocates, and no query takes memory from the engine's flows.
//!
//! DataFusion's memory pool bounds what its operators reserve (sorts, joins,
//! aggregations), not what an expression allocates: `SELECT length(repeat('x',
//! 400000000))` under a 16 MiB pool peaked at 1.5 GiB. So `weir sql` and the console's
//! `:sql` run each query in a child process, `weir sql-worker`, the same binary:
//!
//! - The child opens the tables, then limits its own data segment (`RLIMIT_DATA`: the heap
//!   and every private anonymous mapping, Arrow buffers included) to what it uses after
//!   opening them plus `max_memory` plus [`SLACK`] for the planner and the result's
//!   encoding. An allocation past the limit fails; Rust aborts the child with "memory
//!   allocation of N bytes failed", which the parent turns into [`SqlError::Memory`].
//!   DataFusion's pool keeps `max_memory` too, so an operator over it fails first, with
//!   DataFusion's own message.
//! - The child runs on `partitions` runtime threads (the console gives it 2), at most 8
//!   blocking threads; it shares no memory, thread or lock with the engine.
//! - The parent reads at most `max_memory` bytes of result (Arrow IPC on the child's
//!   stdout) and 64 KiB of its stderr, kills it at the time limit (plus a grace of
//!   [`GRACE`]), and kills it when the query is cancelled (dropped).
//!
//! The protocol: the request is JSON on the child's stdin ([`Request`]); the answer is an
//! Arrow IPC stream on stdout (exit 0; the schema's metadata says whether the rows were
//! cut at `max_rows`), or the [`SqlError`] as JSON (exit [`EXIT_SQL_ERROR`]).

use std::io::{Read, Write};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Catalog, FlowTables, Limits, QueryOutput, SqlError};

/// The hidden subcommand the child runs.
pub const WORKER_COMMAND: &str = "sql-worker";
/// The child's exit code when the query failed with a [`SqlError`] (JSON on stdout).
pub const EXIT_SQL_ERROR: u8 = 3;
/// Memory the child may allocate beyond `max_memory` once its tables are open: the
/// planner, the result's IPC encoding, a few thread stacks.
pub const SLACK: u64 = 64 << 20;
/// How long past its time limit a child may take to answer before it is killed.
pub const GRACE: Duration = Duration::from_secs(5);
/// The schema metadata key saying the rows were cut at `max_rows`.
const TRUNCATED: &str = "weir.truncated";
/// How much of the child's stderr is kept (its last words).
const STDERR_BYTES: u64 = 64 * 1024;

/// What the parent asks of the child.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub flows: Vec<FlowTables>,
    pub sql: String,
    pub timeout_ms: u64,
    pub max_rows: usize,
    pub max_memory: u64,
    pub partitions: usize,
}

impl Request {
    fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_millis(self.timeout_ms),
            max_rows: self.max_rows,
            max_memory: self.max_memory,
            partitions: self.partitions.max(1),
            isolated: false,
        }
    }
}

fn limit_text(limits: &Limits) -> String {
    crate::spec::ByteSize(limits.max_memory).to_string()
}

/// Runs `sql` in a child process (see the module's notes).
pub async fn run(
    flows: &[FlowTables],
    sql: &str,
    limits: &Limits,
) -> Result<QueryOutput, SqlError> {
    let start = Instant::now();
    let exe = std::env::current_exe().map_err(|e| {
        SqlError::Query(format!(
            "cannot find weir's own binary to run the query in: {e}"
        ))
    })?;
    let request = Request {
        flows: flows.to_vec(),
        sql: sql.to_string(),
        timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
        max_rows: limits.max_rows,
        max_memory: limits.max_memory,
        partitions: limits.partitions,
    };
    let request = serde_json::to_vec(&request)
        .map_err(|e| SqlError::Query(format!("cannot encode the query for its process: {e}")))?;
    let mut child = tokio::process::Command::new(exe)
        .arg(WORKER_COMMAND)
        .env("WEIR_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| SqlError::Query(format!("cannot start the query's process: {e}")))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SqlError::Query("the query's process has no pipes".into()));
    };
    let cap = limits.max_memory.saturating_add(1);
    let exchange = async {
        let send = async {
            let r = stdin.write_all(&request).await;
            drop(stdin);
            r
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut stdout, mut stderr) = (stdout.take(cap), stderr.take(STDERR_BYTES));
        let (sent, read_out, read_err) = tokio::join!(
            send,
            stdout.read_to_end(&mut out),
            stderr.read_to_end(&mut err),
        );
        (sent, read_out, read_err, out, err)
    };
    let answered = tokio::time::timeout(limits.timeout + GRACE, exchange).await;
    let Ok((sent, read_out, _, out, err)) = answered else {
        let _ = child.start_kill();
        return Err(SqlError::Timeout {
            limit: humantime::format_duration(limits.timeout).to_string(),
        });
    };
    if out.len() as u64 >= cap {
        let _ = child.start_kill();
        return Err(SqlError::Memory {
            limit: limit_text(limits),
            message: "the result is larger than the limit".into(),
        });
    }
    let status = match tokio::time::timeout(GRACE, child.wait()).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(SqlError::Query(format!("the query's process: {e}"))),
        Err(_) => {
            let _ = child.start_kill();
            return Err(SqlError::Query(
                "the query's process did not end after its answer".into(),
            ));
        }
    };
    let stderr = String::from_utf8_lossy(&err);
    if let Some(line) = stderr.lines().find(|l| l.contains("memory allocation of")) {
        return Err(SqlError::Memory {
            limit: limit_text(limits),
            message: format!("the query allocated past it ({})", line.trim()),
        });
    }
    if let Err(e) = sent.and(read_out.map(|_| ())) {
        return Err(SqlError::Query(format!(
            "the query's process: {e}; {}",
            last_words(&stderr)
        )));
    }
    match status.code() {
        Some(0) => {
            let mut output = decode(&out)?;
            output.elapsed = start.elapsed();
            Ok(output)
        }
        Some(code) if code == i32::from(EXIT_SQL_ERROR) => {
            Err(serde_json::from_slice::<SqlError>(&out)
                .unwrap_or_else(|e| SqlError::Query(format!("the query's process answered {e}"))))
        }
        _ => Err(SqlError::Query(format!(
            "the query's process ended ({status}): {}",
            last_words(&stderr)
        ))),
    }
}

fn last_words(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    if tail.is_empty() {
        "no message".into()
    } else {
        tail.join(" / ")
    }
}

fn decode(bytes: &[u8]) -> Result<QueryOutput, SqlError> {
    let bad = |e: arrow::error::ArrowError| {
        SqlError::Query(format!("the query's process answered unreadable rows: {e}"))
    };
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(bad)?;
    let schema = reader.schema();
    let truncated = schema
        .metadata()
        .get(TRUNCATED)
        .is_some_and(|v| v == "true");
    let batches = reader
        .collect::<Result<Vec<RecordBatch>, _>>()
        .map_err(bad)?;
    let rows = batches.iter().map(RecordBatch::num_rows).sum();
    // The pane and the table printer see the query's own schema, without weir's key.
    let mut metadata = schema.metadata().clone();
    metadata.remove(TRUNCATED);
    let schema = Arc::new(schema.as_ref().clone().with_metadata(metadata));
    let batches = batches
        .into_iter()
        .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    Ok(QueryOutput {
        schema,
        batches,
        rows,
        truncated,
        elapsed: Duration::ZERO,
    })
}

/// `weir sql-worker`: reads a [`Request`] on stdin, answers on stdout (see the module).
pub fn worker_main() -> ExitCode {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().take(64 << 20).read_to_end(&mut input) {
        eprintln!("error: cannot read the query: {e}");
        return ExitCode::FAILURE;
    }
    let request: Request = match serde_json::from_slice(&input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the query's request is not valid: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limits = request.limits();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(limits.partitions)
        .max_blocking_threads(8)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: no runtime for the query: {e}");
            return ExitCode::FAILURE;
        }
    };
    let answer = rt.block_on(async {
        let catalog = Catalog::open(&request.flows, &limits).await?;
        limit_data_segment(limits.max_memory);
        match tokio::time::timeout(limits.timeout, catalog.query(&request.sql)).await {
            Ok(r) => r,
            Err(_) => Err(SqlError::Timeout {
                limit: humantime::format_duration(limits.timeout).to_string(),
            }),
        }
    });
    let mut stdout = std::io::stdout().lock();
    let code = match answer {
        Ok(out) => match encode(&out, &mut stdout) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot send the rows: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => match serde_json::to_writer(&mut stdout, &e) {
            Ok(()) => ExitCode::from(EXIT_SQL_ERROR),
            Err(w) => {
                eprintln!("error: {e} (and cannot send it: {w})");
                ExitCode::FAILURE
            }
        },
    };
    let _ = stdout.flush();
    rt.shutdown_background();
    code
}

fn encode(out: &QueryOutput, w: &mut impl Write) -> Result<(), arrow::error::ArrowError> {
    let mut metadata = out.schema.metadata().clone();
    metadata.insert(TRUNCATED.into(), out.truncated.to_string());
    let schema = Arc::new(out.schema.as_ref().clone().with_metadata(metadata));
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(w, &schema)?;
    for b in &out.batches {
        writer.write(&RecordBatch::try_new(schema.clone(), b.columns().to_vec())?)?;
    }
    writer.finish()
}

/// Caps this process's data segment at what it uses now plus `max_memory` plus
/// [`SLACK`] (`RLIMIT_DATA`; Linux counts the heap and private anonymous mappings). Where
/// the current use cannot be read (not Linux), only DataFusion's pool limits the query.
fn limit_data_segment(max_memory: u64) {
    let Some(used) = data_segment_bytes() else {
        tracing::debug!("no /proc/self/status: the query's memory is DataFusion's pool only");
        return;
    };
    let limit = used.saturating_add(max_memory).saturating_add(SLACK);
    if let Err(e) =
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_DATA, limit, limit)
    {
        tracing::warn!(error = %e, "cannot limit the query's memory (RLIMIT_DATA)");
    }
}

/// `VmData` of /proc/self/status, in bytes.
fn data_segment_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmData:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn rows_and_the_cut_survive_the_pipe() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        let out = QueryOutput {
            schema,
            batches: vec![batch],
            rows: 2,
            truncated: true,
            elapsed: Duration::ZERO,
        };
        let mut bytes = Vec::new();
        encode(&out, &mut bytes).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back.rows, 2);
        assert!(back.truncated);
        assert!(back.schema.metadata().is_empty());
        assert_eq!(back.batches[0].column(1).null_count(), 1);
    }

    #[test]
    fn the_data_segment_is_read() {
        if cfg!(target_os = "linux") {
            assert!(data_segment_bytes().is_some_and(|b| b > 0));
        }
    }
}
