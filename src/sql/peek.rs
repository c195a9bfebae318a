//! Peeks at a flow's data, what an operator looks at first when a schema mismatch
//! fires (docs/sql.md, "Peek"):
//!
//! - [`latest_output`]: the rows the sink table's last commit added (the newest Delta
//!   version whose `add` actions change data; an OPTIMIZE with `dataChange = false` is
//!   passed over), read through deltalake's DataFusion provider restricted to those files;
//! - [`latest_input`]: the rows of the files of the flow's last batch (files sources),
//!   decoded as the flow decodes them, `_rescued_data` included, each row with its
//!   `_file` and, for a corrupt record, its `_line`.
//!
//! Both read only; both run under the same [`Limits`] as a query.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use deltalake::kernel::Action;

use super::{FlowTables, Limits, QueryOutput, SqlError, session};
use crate::checkpoint::Checkpoint;
use crate::schema::RESCUED_DATA_COLUMN;
use crate::source::files::ledger::{Ledger, ListedFile};
use crate::source::files::read::{FileMeta, ReadSpec, decode_file};

/// Delta versions looked through, newest first, for a commit that added rows.
pub const VERSIONS_SCANNED: u64 = 100;
/// Batches looked through, newest first, for one with input files.
pub const BATCHES_SCANNED: u64 = 20;

/// Rows to show and what they are.
#[derive(Debug, Clone)]
pub struct Peek {
    /// E.g. `silver_flights: rows added by Delta version 12 (WRITE, 2 files)`.
    pub title: String,
    pub output: QueryOutput,
}

fn within<T>(
    limits: &Limits,
    work: impl std::future::Future<Output = Result<T, SqlError>>,
) -> impl std::future::Future<Output = Result<T, SqlError>> {
    let timeout = limits.timeout;
    async move {
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(SqlError::Timeout {
                limit: humantime::format_duration(timeout).to_string(),
            }),
        }
    }
}

/// The rows added by the sink table's last data commit.
pub async fn latest_output(flow: &FlowTables, limits: &Limits) -> Result<Peek, SqlError> {
    within(limits, output_rows(flow, limits)).await
}

async fn output_rows(flow: &FlowTables, limits: &Limits) -> Result<Peek, SqlError> {
    let start = Instant::now();
    let Some(path) = &flow.sink else {
        return Err(SqlError::Query(format!(
            "flow {} writes no Delta table: nothing to peek at",
            flow.flow
        )));
    };
    let shown = path.display().to_string();
    let unavailable = |message: String| SqlError::Unavailable {
        name: flow.flow.clone(),
        path: shown.clone(),
        message,
    };
    let not_created = || SqlError::NotCreated {
        name: flow.flow.clone(),
        path: shown.clone(),
    };
    let table = crate::delta::open_existing(path)
        .await
        .map_err(|e| unavailable(e.to_string()))?
        .ok_or_else(not_created)?;
    let latest = table.version().ok_or_else(not_created)?;
    let log_store = table.log_store();
    let oldest = latest.saturating_sub(VERSIONS_SCANNED - 1);
    let mut found = None;
    for version in (oldest..=latest).rev() {
        let Some(bytes) = log_store
            .read_commit_entry(version)
            .await
            .map_err(|e| unavailable(e.to_string()))?
        else {
            break;
        };
        let actions = deltalake::logstore::get_actions(version, &bytes)
            .map_err(|e| unavailable(e.to_string()))?;
        let mut operation = None;
        let mut adds = Vec::new();
        for action in actions {
            match action {
                Action::Add(add) if add.data_change => adds.push(add),
                Action::CommitInfo(info) => operation = info.operation.clone(),
                _ => {}
            }
        }
        if !adds.is_empty() {
            found = Some((version, operation, adds));
            break;
        }
    }
    let Some((version, operation, adds)) = found else {
        return Err(SqlError::Query(format!(
            "{}: no commit of the last {VERSIONS_SCANNED} versions (up to {latest}) added rows",
            flow.flow
        )));
    };
    let files = adds.len();
    let ctx = session(limits)?;
    table
        .update_datafusion_session(&ctx.state())
        .map_err(|e| unavailable(e.to_string()))?;
    let provider = deltalake::delta_datafusion::TableProviderBuilder::default()
        .with_log_store(log_store)
        .with_table_version(version)
        .with_adds(adds)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    ctx.register_table("latest_output", provider)
        .map_err(|e| unavailable(e.to_string()))?;
    let df = ctx
        .sql("SELECT * FROM latest_output")
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let mut output = super::collect(df, limits.max_rows)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    output.elapsed = start.elapsed();
    Ok(Peek {
        title: format!(
            "{}: rows added by Delta version {version} ({}{})",
            flow.flow,
            operation.map(|o| format!("{o}, ")).unwrap_or_default(),
            if files == 1 {
                "1 file".to_string()
            } else {
                format!("{files} files")
            }
        ),
        output,
    })
}

/// The rows of the files of the flow's last batch with input files.
pub async fn latest_input(flow: &FlowTables, limits: &Limits) -> Result<Peek, SqlError> {
    let flow = flow.clone();
    let limits = *limits;
    within(&limits, async move {
        tokio::task::spawn_blocking(move || input_rows(&flow, &limits))
            .await
            .map_err(|e| SqlError::Query(format!("the input peek failed: {e}")))?
    })
    .await
}

fn input_rows(flow: &FlowTables, limits: &Limits) -> Result<Peek, SqlError> {
    let start = Instant::now();
    let Some(source) = &flow.files_source else {
        return Err(SqlError::Query(format!(
            "flow {} does not read files (or its pipeline is not known here): peek at its source table with o on the upstream flow, or :sql",
            flow.flow
        )));
    };
    let Some(cp) = &flow.checkpoint else {
        return Err(SqlError::Query(format!(
            "flow {}: its checkpoint is not known",
            flow.flow
        )));
    };
    let checkpoint = Checkpoint::at(cp);
    let err = |e: crate::Error| SqlError::Query(format!("flow {}: {e}", flow.flow));
    let Some((last, _)) = checkpoint.latest_offsets().map_err(err)? else {
        return Err(SqlError::Query(format!(
            "flow {} has planned no batch yet",
            flow.flow
        )));
    };
    let Some(ledger) = Ledger::open_read_only(&checkpoint.ledger_path()).map_err(err)? else {
        return Err(SqlError::Query(format!(
            "flow {}: no file ledger in {}",
            flow.flow,
            cp.display()
        )));
    };
    let mut batch = last;
    let mut files: Vec<ListedFile> = Vec::new();
    for id in (last.saturating_sub(BATCHES_SCANNED - 1)..=last).rev() {
        files = ledger.files_for_batch(id).map_err(err)?;
        if !files.is_empty() {
            batch = id;
            break;
        }
    }
    if files.is_empty() {
        return Err(SqlError::Query(format!(
            "flow {}: no input files in its last {BATCHES_SCANNED} batches",
            flow.flow
        )));
    }
    // The schema the flow reads with: given, or the latest recorded (never inferred
    // here: a peek writes nothing).
    let schema = match crate::source::files::schema_store::given(source) {
        Some(s) => s,
        None => {
            let location = crate::source::files::schema_store::location(
                &checkpoint,
                source.schema_location.as_deref(),
            );
            match crate::source::files::schema_store::latest(location).map_err(err)? {
                Some((_, s)) => Arc::new(s),
                None => {
                    return Err(SqlError::Query(format!(
                        "flow {}: no schema recorded yet",
                        flow.flow
                    )));
                }
            }
        }
    };
    let spec = ReadSpec {
        format: source.format,
        csv: source.csv.clone(),
        schema: schema.clone(),
        rescued_data: true,
        text: source.text.clone(),
        partitions: crate::source::files::partition::Partitioning::from_schema(
            &source.path,
            &schema,
        ),
        follow_links: source.follow_symlinks != crate::spec::FollowSymlinks::Never,
        remote: crate::source::files::remote::Landing::of(&source.path)
            .map_err(|e| SqlError::Query(e.to_string()))?,
    };
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut rows = 0usize;
    let mut truncated = false;
    let mut failed: Vec<String> = Vec::new();
    let mut out_schema = None;
    'files: for file in &files {
        let meta = FileMeta {
            path: file.path.clone().into(),
            size: file.size,
            modification_time_ms: file.modification_time_ms,
        };
        let decoded = match decode_file(&meta, &spec) {
            Ok(d) => d,
            Err(e) => {
                failed.push(e.to_string());
                continue;
            }
        };
        for b in decoded.batches {
            let b = with_file_and_line(&b, &file.path).map_err(SqlError::Query)?;
            let schema = out_schema.get_or_insert_with(|| b.schema()).clone();
            if b.schema() != schema {
                failed.push(format!("{}: decoded with other columns", file.path));
                continue 'files;
            }
            if rows == limits.max_rows {
                truncated = b.num_rows() > 0;
                break 'files;
            }
            let room = limits.max_rows - rows;
            if b.num_rows() > room {
                batches.push(b.slice(0, room));
                rows += room;
                truncated = true;
                break 'files;
            }
            rows += b.num_rows();
            batches.push(b);
        }
    }
    let schema = out_schema.unwrap_or_else(|| Arc::new(Schema::empty()));
    let mut title = format!(
        "{}: rows of the {} of batch {batch}",
        flow.flow,
        if files.len() == 1 {
            "1 input file".to_string()
        } else {
            format!("{} input files", files.len())
        }
    );
    if !failed.is_empty() {
        title.push_str(&format!("; unreadable: {}", failed.join("; ")));
    }
    Ok(Peek {
        title,
        output: QueryOutput {
            schema,
            batches,
            rows,
            truncated,
            elapsed: start.elapsed(),
        },
    })
}

/// `_file` and `_line` in front of a decoded batch: the file's path, and the line a
/// corrupt record starts at (from its `_rescued_data`; null for other rows).
fn with_file_and_line(batch: &RecordBatch, file: &str) -> Result<RecordBatch, String> {
    let n = batch.num_rows();
    let lines: Int64Array = match batch.column_by_name(RESCUED_DATA_COLUMN) {
        Some(c) => match c.as_string_opt::<i32>() {
            Some(s) => (0..n)
                .map(|i| {
                    if s.is_null(i) {
                        return None;
                    }
                    serde_json::from_str::<serde_json::Value>(s.value(i))
                        .ok()
                        .and_then(|v| v.get("_line").and_then(serde_json::Value::as_i64))
                })
                .collect(),
            None => Int64Array::from(vec![None; n]),
        },
        None => Int64Array::from(vec![None; n]),
    };
    let mut fields = vec![
        Arc::new(Field::new("_file", DataType::Utf8, false)),
        Arc::new(Field::new("_line", DataType::Int64, true)),
    ];
    fields.extend(batch.schema().fields().iter().cloned());
    let mut columns: Vec<ArrayRef> =
        vec![Arc::new(StringArray::from(vec![file; n])), Arc::new(lines)];
    columns.extend(batch.columns().iter().cloned());
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}
