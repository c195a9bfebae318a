//! The Delta Lake sink: one commit per micro-batch, idempotent by application
//! transaction (Delta's `txn` action, `txnAppId` / `txnVersion`), as Spark's
//! Delta sink does. Every read and write goes through `deltalake`.
//!
//! Types are normalised before a write so that what DataFusion produces fits
//! Delta's type system: timestamps with a zone become `Timestamp(µs, "UTC")`
//! (Delta `timestamp`), without a zone `Timestamp(µs)` (Delta `timestamp_ntz`),
//! `Utf8View`/`LargeUtf8` become `Utf8`, dictionaries are unpacked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use deltalake::DeltaTable;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::{
    CommitBuilder, CommitProperties, FinalizedCommit, TableReference,
};
use deltalake::kernel::{Action, Add};
use deltalake::operations::write::writer::{DeltaWriter, WriterConfig};
use deltalake::operations::write::{SchemaMode, WriterStatsConfig};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::table::config::TablePropertiesExt as _;

use super::SinkCommit;
use crate::delta::{delta_error, open_table};
use crate::error::{Error, Result};

pub struct DeltaSink {
    path: PathBuf,
    partition_by: Vec<String>,
    merge_schema: bool,
    app_id: String,
    /// `false` skips the replay check below (unsafe; `idempotent = false` in a pipeline).
    idempotent: bool,
    /// Delta column mapping for a table this sink creates (`column_mapping_mode`).
    column_mapping: Option<crate::spec::ColumnMappingMode>,
    /// Table properties for a table this sink creates (`table_properties`).
    properties: std::collections::BTreeMap<String, String>,
    table: DeltaTable,
    /// The batch this sink appended last, when its own write succeeded in this process
    /// (see [`DeltaSink::add_batch`]).
    appended: Option<u64>,
    /// deltalake's post-commit of this sink's last direct append, still running (see
    /// [`DeltaSink::settle`]).
    post_commit: Option<PendingPostCommit>,
    /// The Delta kernel's snapshot the direct appends commit against: protocol, metadata
    /// and log segment, without the table's file list ([`DeltaSink::kernel_commit`]).
    /// It moves with each of this sink's commits; `table` is brought up to it when a
    /// path that needs the files runs.
    kernel: Option<delta_kernel::SnapshotRef>,
    /// The Delta checkpoint of a version this sink committed, written in the background
    /// (due every `delta.checkpointInterval` versions).
    checkpoint: Option<PendingCheckpoint>,
    /// The commit's operation when it is not a streaming append (`weir copy-into`'s
    /// `COPY INTO`, [`DeltaSink::operation`]).
    operation: Option<CommitOperation>,
}

/// A commit's operation as Delta's `commitInfo` records it (`operation`,
/// `operationParameters`, `operationMetrics`), for a write that is not a streaming
/// append: `weir copy-into` commits as Databricks' `COPY INTO`.
#[derive(Debug, Clone)]
pub struct CommitOperation {
    /// `operation`, e.g. `COPY INTO`.
    pub name: String,
    /// `operationParameters` (string values, as Delta writes them).
    pub parameters: std::collections::HashMap<String, serde_json::Value>,
    /// `operationMetrics` beyond the rows and files this sink counts itself
    /// (`numFiles`, `numOutputRows`, `numOutputBytes`).
    pub metrics: serde_json::Map<String, serde_json::Value>,
}

/// A Delta checkpoint (and the expired-log cleanup that follows one) being written.
struct PendingCheckpoint {
    version: u64,
    task: tokio::task::JoinHandle<std::result::Result<(), String>>,
}

/// Commit attempts of one direct append when other writers commit in between.
const KERNEL_COMMIT_ATTEMPTS: usize = 15;

/// deltalake's post-commit of a version already in the log: it brings the writer's
/// snapshot to that version (re-materialising the table's file list), writes a
/// checkpoint when one is due and removes expired log entries when asked.
struct PendingPostCommit {
    version: i64,
    task: tokio::task::JoinHandle<deltalake::DeltaResult<FinalizedCommit>>,
}

impl DeltaSink {
    pub async fn open(
        path: &Path,
        partition_by: Vec<String>,
        merge_schema: bool,
        app_id: &str,
    ) -> Result<Self> {
        let table = open_table(path).await?;
        let sink = DeltaSink {
            path: path.to_path_buf(),
            partition_by,
            merge_schema,
            app_id: app_id.to_string(),
            idempotent: true,
            column_mapping: None,
            properties: Default::default(),
            table,
            appended: None,
            post_commit: None,
            kernel: None,
            checkpoint: None,
            operation: None,
        };
        sink.catch_up_checkpoint().await;
        Ok(sink)
    }

    /// Writes the Delta checkpoint deltalake's post-commit was due to write and did not
    /// (the process stopped while it ran, [`DeltaSink::settle`]), at the table's latest
    /// version, so that readers replay at most `delta.checkpointInterval` commits again.
    /// Any checkpoint at or after the one due will do (another writer's, multi-part).
    /// A failure is logged: nothing depends on the checkpoint.
    async fn catch_up_checkpoint(&self) {
        let (Some(version), Ok(state)) = (self.table.version(), self.table.snapshot()) else {
            return;
        };
        let interval = state.table_config().checkpoint_interval().get();
        if version + 1 < interval {
            return;
        }
        let due = (version + 1) / interval * interval - 1;
        let Ok(entries) = std::fs::read_dir(self.path.join("_delta_log")) else {
            return;
        };
        let has_checkpoint = entries.filter_map(|e| e.ok()).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            // A complete checkpoint file, not a staging file a stopped write left
            // behind (`<v>.checkpoint.parquet#1`).
            name.contains(".checkpoint.")
                && (name.ends_with(".parquet") || name.ends_with(".json"))
                && name
                    .get(..20)
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|v| v >= due)
        });
        if has_checkpoint {
            return;
        }
        match deltalake::protocol::checkpoints::create_checkpoint(&self.table, None).await {
            Ok(()) => tracing::info!(table = %self.path.display(), due, version,
                "wrote the Delta checkpoint a stopped post-commit did not"),
            Err(e) => tracing::warn!(table = %self.path.display(), due, error = %e,
                "could not write the Delta checkpoint that is due; readers replay more of the log"),
        }
    }

    /// Creates the table with Delta column mapping (`delta.columnMapping.mode`), so that
    /// column names Delta otherwise refuses (spaces, `,;{}()=`, newline, tab) are stored.
    pub fn column_mapping(mut self, mode: Option<crate::spec::ColumnMappingMode>) -> Self {
        self.column_mapping = mode;
        self
    }

    /// The existing table's column mapping mode (`delta.columnMapping.mode`), when not `none`.
    fn table_column_mapping(&self) -> Option<String> {
        let snapshot = self.table.snapshot().ok()?;
        crate::delta::column_mapping_mode(snapshot.metadata().configuration()).map(str::to_string)
    }

    /// Whether the batch's column names are free of Delta's restrictions: the table is
    /// column-mapped, or this sink creates it so.
    fn names_are_mapped(&self) -> bool {
        if self.table.version().is_some() {
            self.table_column_mapping().is_some()
        } else {
            self.column_mapping.is_some()
        }
    }

    /// Table properties set when this sink creates the table (`table_properties`, e.g.
    /// `delta.enableChangeDataFeed = "true"`); an existing table keeps its own.
    pub fn table_properties(
        mut self,
        properties: &std::collections::BTreeMap<String, String>,
    ) -> Self {
        self.properties = properties.clone();
        self
    }

    /// The `configuration` of a table this sink creates: `table_properties` and column mapping.
    fn creation_configuration(&self) -> Vec<(String, Option<String>)> {
        let mut configuration: Vec<(String, Option<String>)> = self
            .properties
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        if let Some(mode) = self.column_mapping {
            configuration.push((
                "delta.columnMapping.mode".to_string(),
                Some(mode.as_str().to_string()),
            ));
        }
        configuration
    }

    /// Commits every append as `operation` (its `commitInfo`) instead of a streaming
    /// `WRITE`: a missing table is created empty first (a version of its own without a
    /// txn, as for a large first append), and the rows go in one commit of their own
    /// with the txn, through deltalake's `CommitBuilder` (the Delta kernel's commit
    /// cannot name its operation's metrics). An append that cannot take the direct path
    /// (a partitioned or column-mapped table, constraints, another schema) goes through
    /// deltalake's write operation, whose commit says `WRITE` and carries the
    /// operation's parameters and metrics.
    pub fn operation(mut self, operation: CommitOperation) -> Self {
        self.operation = Some(operation);
        self
    }

    /// With `false`, a replayed batch is written again: duplicates after a crash.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        if !idempotent {
            tracing::warn!(table = %self.path.display(), "idempotent = false: batches replayed after a crash will be appended again (duplicates)");
        }
        self.idempotent = idempotent;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn description(&self) -> String {
        format!("DeltaSink[{}]", self.path.display())
    }

    /// The table's latest version this sink knows: its own last commit included, while
    /// deltalake's post-commit of it still runs.
    pub fn version(&self) -> Option<i64> {
        let table = match &self.post_commit {
            Some(pending) => Some(pending.version),
            None => self.table.version().map(|v| v as i64),
        };
        let kernel = self.kernel.as_ref().map(|k| k.version() as i64);
        table.max(kernel)
    }

    /// Waits for deltalake's post-commit of this sink's last direct append. The commit is
    /// in the log (readers see it) before its post-commit starts; the post-commit only
    /// prepares the next commit (the writer's snapshot) and writes a checkpoint when one
    /// is due, so it runs while the engine finishes the batch and plans the next one.
    /// A failed post-commit loses nothing (the version is committed): the table is read
    /// again, and the next batch checks the log for a replay as after a restart.
    pub async fn settle(&mut self) -> Result<()> {
        self.settle_checkpoint(true).await;
        self.settle_post_commit().await
    }

    /// Waits for the background checkpoint (`wait`), or only collects it when it is done.
    /// A failed checkpoint is logged: the commits stand, readers replay more of the log,
    /// and the next sink to open the table writes it ([`DeltaSink::catch_up_checkpoint`]).
    async fn settle_checkpoint(&mut self, wait: bool) {
        let Some(pending) = self.checkpoint.take() else {
            return;
        };
        if !wait && !pending.task.is_finished() {
            self.checkpoint = Some(pending);
            return;
        }
        let outcome = match pending.task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(format!("the checkpoint task stopped: {e}")),
        };
        if let Err(error) = outcome {
            tracing::warn!(table = %self.path.display(), version = pending.version, %error,
                "could not write the Delta checkpoint that is due; readers replay more of the log");
        }
    }

    async fn settle_post_commit(&mut self) -> Result<()> {
        let Some(pending) = self.post_commit.take() else {
            return Ok(());
        };
        let outcome = match pending.task.await {
            Ok(outcome) => outcome,
            Err(e) => Err(deltalake::DeltaTableError::Generic(format!(
                "the post-commit task stopped: {e}"
            ))),
        };
        match outcome {
            Ok(finalized) => {
                self.table.state = Some(finalized.snapshot);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(table = %self.path.display(), version = pending.version, error = %e,
                    "deltalake's post-commit (snapshot update, checkpoint) failed after the commit; the version stands, the table is read again");
                self.appended = None;
                self.table
                    .update_incremental(None)
                    .await
                    .map_err(|e| self.err(e))
            }
        }
    }

    fn err(&self, source: deltalake::DeltaTableError) -> Error {
        delta_error(&self.path, source)
    }

    /// Loads the table's latest version and says whether it records batch `batch_id` of
    /// this app id already (Delta `txn`: a replay after a crash).
    async fn already_committed(&mut self, batch_id: u64) -> Result<bool> {
        self.settle().await?;
        if self.table.version().is_some() {
            self.table
                .update_incremental(None)
                .await
                .map_err(|e| self.err(e))?;
        } else {
            // The table may have been created by a previous attempt of this batch.
            self.table = open_table(&self.path).await?;
        }
        if !self.idempotent || self.table.version().is_none() {
            return Ok(false);
        }
        let committed = crate::delta::table_txn_version(&self.table, &self.app_id)
            .await
            .map_err(|e| self.err(e))?;
        if let Some(v) = committed
            && v > batch_id as i64
        {
            // Only a table ahead of the checkpoint records a later batch of this query.
            return Err(crate::delta::table_ahead_error(
                &self.path,
                &self.path,
                &self.app_id,
                v,
                Some(batch_id),
            ));
        }
        let done = committed == Some(batch_id as i64);
        if done {
            tracing::info!(batch_id, app_id = %self.app_id, "batch already in the Delta log (replay after a crash); skipping the write");
            crate::delta::sync_txn_commit(&self.table, &self.path, &self.app_id, batch_id).await?;
        }
        Ok(done)
    }

    /// Upserts the batch (Delta MERGE on `keys`) in one commit with txn (app id, batch
    /// id), unless the table records this batch already. Rows of one key within the
    /// batch are reduced to one first (the greatest `order_by` value, ties by arrival);
    /// without `order_by` a key with several rows fails the batch before anything is
    /// written ([`super::merge`]). The first batch creates the table. Keys match with
    /// SQL's `=` (a null key matches nothing: the row is inserted), or with `<=>` when
    /// `null_safe`. With `order_by` a matched table row is updated only when the batch's
    /// row is not older (`t.o IS NULL OR s.o >= t.o`).
    pub async fn merge_batch(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
        keys: &[String],
        order_by: Option<&str>,
        null_safe: bool,
        schema: Option<&SchemaRef>,
    ) -> Result<SinkCommit> {
        if self.already_committed(batch_id).await? {
            return Ok(SinkCommit {
                num_output_rows: 0,
                delta_version: self.version(),
                skipped: true,
            });
        }
        let batches = batches
            .iter()
            .map(normalize_batch)
            .collect::<Result<Vec<_>>>()?;
        let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if num_rows == 0 || self.table.version().is_none() {
            // Nothing to merge, or no table yet: an append (of the deduplicated rows) creates it.
            let rows = if num_rows == 0 {
                batches
            } else {
                super::merge::latest_per_key(batches, keys, order_by, null_safe)
                    .await?
                    .collect()
                    .await
                    .map_err(|e| self.merge_error(e.into()))?
            };
            return self.add_batch(batch_id, rows, false, schema).await;
        }
        if let Some(first) = batches.first() {
            check_column_names(&self.path, &first.schema())?;
        }
        let source = super::merge::latest_per_key(batches, keys, order_by, null_safe).await?;
        let columns: Vec<String> = source
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let qualified = |q: &str, c: &str| {
            datafusion::prelude::Expr::Column(datafusion::common::Column::new(Some(q), c))
        };
        let predicate = keys
            .iter()
            .map(|k| {
                datafusion::logical_expr::binary_expr(
                    qualified("t", k),
                    if null_safe {
                        datafusion::logical_expr::Operator::IsNotDistinctFrom
                    } else {
                        datafusion::logical_expr::Operator::Eq
                    },
                    qualified("s", k),
                )
            })
            .reduce(|a, b| a.and(b))
            .ok_or_else(|| Error::SinkSchemaMismatch {
                path: self.path.display().to_string(),
                message: "a delta_merge sink needs at least one key".into(),
            })?;
        // With `order_by`, a matched row is updated only when the batch's row is not
        // older than the table's: `t.o IS NULL OR s.o >= t.o` (Delta's documented
        // "latest wins" upsert, `WHEN MATCHED AND s.o > t.o`, with the in-batch rule's
        // nulls-oldest and ties-to-the-later-arrival): a replayed or late batch never
        // overwrites a newer row with an older one.
        let newer = order_by.map(|o| {
            qualified("t", o)
                .is_null()
                .or(qualified("s", o).gt_eq(qualified("t", o)))
        });
        let commit = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, batch_id as i64));
        let unqualified = |c: &str| datafusion::common::Column::new_unqualified(c);
        let (table, metrics) = self
            .table
            .clone()
            .merge(source, predicate)
            .with_source_alias("s")
            .with_target_alias("t")
            .with_commit_properties(commit)
            .when_matched_update(|mut update| {
                if let Some(newer) = newer {
                    update = update.predicate(newer);
                }
                for c in &columns {
                    update = update.update(unqualified(c), qualified("s", c));
                }
                update
            })
            .and_then(|m| {
                m.when_not_matched_insert(|mut insert| {
                    for c in &columns {
                        insert = insert.set(unqualified(c), qualified("s", c));
                    }
                    insert
                })
            })
            .map_err(|e| self.merge_error(e))?
            .await
            .map_err(|e| self.merge_error(e))?;
        self.table = table;
        tracing::debug!(
            batch_id,
            inserted = metrics.num_target_rows_inserted,
            updated = metrics.num_target_rows_updated,
            "merged"
        );
        Ok(SinkCommit {
            num_output_rows: metrics.num_source_rows as u64,
            delta_version: self.version(),
            skipped: false,
        })
    }

    fn merge_error(&self, e: deltalake::DeltaTableError) -> Error {
        match e {
            deltalake::DeltaTableError::SchemaMismatch { msg } => Error::SinkSchemaMismatch {
                path: self.path.display().to_string(),
                message: format!("{msg}; nothing was merged"),
            },
            other => self.err(other),
        }
    }

    /// Appends the batch in one commit with txn (app id, batch id), unless the table
    /// already records this batch for this app id. `overwrite` replaces the table's
    /// content (output mode complete); `schema` is the flow's output schema, used to
    /// create the table when the first batch has no rows.
    pub async fn add_batch(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        schema: Option<&SchemaRef>,
    ) -> Result<SinkCommit> {
        self.settle_post_commit().await?;
        self.settle_checkpoint(false).await;
        // The batch right after one this sink appended itself needs no replay check:
        // the table cannot hold it yet (only this process runs the query: the
        // checkpoint lock), so neither the log nor its transactions are read again
        // (the commit itself still detects a concurrent writer's commits). Any other
        // case, and the batch after a failed attempt, is checked.
        let follows_own_append = !overwrite
            && self.idempotent
            && self.table.version().is_some()
            && self.appended.take().is_some_and(|b| b + 1 == batch_id);
        if !follows_own_append && self.already_committed(batch_id).await? {
            return Ok(SinkCommit {
                num_output_rows: 0,
                delta_version: self.version(),
                skipped: true,
            });
        }
        // Each batch is dropped once normalised (a cast column is not held twice).
        let mut batches = batches
            .into_iter()
            .map(|b| normalize_batch(&b))
            .collect::<Result<Vec<_>>>()?;
        if !overwrite {
            batches = self.with_missing_columns(batches)?;
        }
        let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let mapped = self.names_are_mapped();
        if let Some(first) = batches.first()
            && !mapped
        {
            check_column_names(&self.path, &first.schema())?;
        }
        if num_rows == 0 {
            // Nothing to append. The first batch still creates the table (with the flow's
            // output schema), so readers find it from batch 0 on, as with Spark's Delta sink.
            let Some(schema) = schema.filter(|_| self.table.version().is_none()) else {
                return Ok(SinkCommit {
                    num_output_rows: 0,
                    delta_version: self.version(),
                    skipped: false,
                });
            };
            let empty = normalize_batch(&RecordBatch::new_empty(schema.clone()))?;
            if !mapped {
                check_column_names(&self.path, &empty.schema())?;
            }
            batches = vec![empty];
        }
        let mut creating = self.table.version().is_none();
        // A first append big enough for the parallel writers: the table is created first,
        // empty, by delta-rs's write of the batch's schema (no txn), so the rows take the
        // parallel path as every later batch's do. The txn is in the commit that adds the
        // rows: a batch stopped between the two commits is written again on restart.
        if creating
            && !overwrite
            && (parallel_sized(&batches, num_rows) || self.operation.is_some())
            && let Some(first) = batches.first()
            && self.create_empty(&first.schema()).await?
        {
            creating = false;
        }
        if !overwrite && let Some(config) = self.direct_append_config(&batches)? {
            return self
                .direct_append(batch_id, batches, num_rows, config)
                .await;
        }
        // The write operation works on the table's file list: bring it up to this sink's
        // own kernel commits first.
        self.catch_up_table().await?;
        // delta-rs cannot evolve a column-mapped table: merge only when it is not one.
        let merge = self.merge_schema
            && !(mapped && !creating && self.fits_table(batches.first().map(|b| b.schema()))?);
        let mut commit = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, batch_id as i64))
            .with_cleanup_expired_logs(self.log_cleanup());
        if let Some(op) = &self.operation {
            let mut metrics = op.metrics.clone();
            metrics.insert("numOutputRows".into(), num_rows.into());
            commit = commit.with_metadata([
                (
                    "operationParameters".to_owned(),
                    serde_json::Value::Object(op.parameters.clone().into_iter().collect()),
                ),
                (
                    "operationMetrics".to_owned(),
                    serde_json::Value::Object(metrics),
                ),
            ]);
        }
        let mut builder = self
            .table
            .clone()
            .write(batches)
            .with_save_mode(if overwrite {
                SaveMode::Overwrite
            } else {
                SaveMode::Append
            })
            .with_commit_properties(commit);
        if !self.partition_by.is_empty() {
            builder = builder.with_partition_columns(self.partition_by.clone());
        }
        if creating {
            let configuration = self.creation_configuration();
            if !configuration.is_empty() {
                builder = builder.with_configuration(configuration);
            }
        }
        if merge {
            builder = builder.with_schema_mode(SchemaMode::Merge);
        }
        let table = builder.await.map_err(|e| match e {
            deltalake::DeltaTableError::SchemaMismatch { msg } => Error::SinkSchemaMismatch {
                path: self.path.display().to_string(),
                message: format!(
                    "{msg}; nothing was written. Set `merge_schema = true` on the sink to add new columns, or fix the flow's `select`"
                ),
            },
            // The batch's columns do not fit the table's (e.g. a new column without merge_schema).
            deltalake::DeltaTableError::Arrow {
                source: arrow::error::ArrowError::SchemaError(msg),
            } => Error::SinkSchemaMismatch {
                path: self.path.display().to_string(),
                message: format!(
                    "{msg}; nothing was written. Set `merge_schema = true` on the sink to add new columns, or fix the flow's `select`"
                ),
            },
            other => self.err(other),
        })?;
        self.table = table;
        if !overwrite {
            self.appended = Some(batch_id);
        }
        Ok(SinkCommit {
            num_output_rows: num_rows as u64,
            delta_version: self.version(),
            skipped: false,
        })
    }
}

/// A streamed append of one batch ([`DeltaSink::begin_streamed_append`]): what its
/// Parquet writers need, cloned to each.
#[derive(Clone)]
pub struct StreamedAppend {
    path: PathBuf,
    store: deltalake::logstore::ObjectStoreRef,
    config: WriterConfig,
    /// The rows' columns once normalised ([`normalize_batch`]): names and types the
    /// table was found to have.
    columns: SchemaRef,
    /// The table does not exist yet: it is created with `columns` at the commit, once
    /// every file is written (nothing is created for a batch declined before).
    create: bool,
    started: std::time::Instant,
}

impl StreamedAppend {
    /// Whether the commit creates the table (see [`DeltaSink::begin_streamed_append`]).
    pub fn creates_table(&self) -> bool {
        self.create
    }

    /// A Parquet writer of its own for one thread.
    pub fn writer(&self) -> StreamedWriter {
        StreamedWriter {
            append: self.clone(),
            file_schema: self.config.file_schema(),
            writer: DeltaWriter::new(self.store.clone(), self.config.clone()),
            num_rows: 0,
        }
    }

    /// Removes files its writers wrote that no commit will add (a streamed batch given
    /// up before its commit): no reader could see them; what is not removed stays an
    /// orphan that `VACUUM` removes. Only these files, never another.
    pub async fn discard(&self, adds: &[Add]) {
        use object_store::ObjectStoreExt as _;
        for add in adds {
            let location = add_location(&add.path);
            if let Err(e) = self.store.delete(&location).await {
                tracing::debug!(table = %self.path.display(), file = %add.path, error = %e,
                    "an uncommitted file of a streamed append was not removed (an orphan VACUUM removes)");
            }
        }
    }
}

/// Rows per write into a Parquet writer: delta-rs's `DeltaWriter` slices each batch into
/// pieces of this many rows, and the Parquet writer encodes each column that many
/// values at a time. The defaults of both, 1,024, make each column's levels, gathers
/// and page checks be allocated and freed 8 times per decoded batch of 8,192 rows,
/// and every allocation over 1 KiB takes the one malloc arena's lock (src/malloc.rs):
/// 8,192 makes the bronze ingest ~7% faster (BENCHMARKS.md, "Bronze ingest: fewer
/// allocations"). Pages still close at Parquet's limits (1 MiB, 20,000 rows), checked
/// every 8,192 values instead of every 1,024.
const WRITE_BATCH_ROWS: usize = 8192;

/// Rows per Parquet row group (Parquet's default is 1 M, Spark's ~128 MB, DuckDB's
/// 122,880): a writer hands each row group to the file as it completes instead of
/// encoding and writing a whole file at its close, so the writes overlap the encode and
/// less of a file is held in memory (BENCHMARKS.md, "Bronze ingest: fewer allocations").
const ROW_GROUP_ROWS: usize = 131_072;

/// delta-rs's own Parquet writer properties (its `created_by`, Snappy), with
/// [`WRITE_BATCH_ROWS`] values per encode.
fn writer_properties() -> deltalake::parquet::file::properties::WriterProperties {
    deltalake::parquet::file::properties::WriterProperties::builder()
        .set_created_by(format!("delta-rs version {}", deltalake::crate_version()))
        .set_compression(deltalake::parquet::basic::Compression::SNAPPY)
        .set_write_batch_size(WRITE_BATCH_ROWS)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build()
}

/// One thread's Parquet writer of a [`StreamedAppend`].
pub struct StreamedWriter {
    append: StreamedAppend,
    file_schema: SchemaRef,
    writer: DeltaWriter,
    num_rows: usize,
}

impl StreamedWriter {
    /// Writes rows of the flow's output: normalised to Delta's types, they must have the
    /// table's columns exactly (a NOT NULL column without a null), else an error and
    /// nothing of them is written.
    pub async fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let err = |e: deltalake::DeltaTableError| delta_error(&self.append.path, e);
        let batch = normalize_batch(batch)?;
        let same_columns = batch.schema().fields().len() == self.append.columns.fields().len()
            && (batch.schema().fields().iter())
                .zip(self.append.columns.fields())
                .all(|(b, c)| b.name() == c.name() && b.data_type() == c.data_type());
        if !same_columns {
            return Err(err(deltalake::DeltaTableError::Generic(format!(
                "the rows' columns changed within the batch: {:?}",
                batch.schema()
            ))));
        }
        let batch = RecordBatch::try_new(self.file_schema.clone(), batch.columns().to_vec())
            .map_err(|e| err(e.into()))?;
        self.num_rows += batch.num_rows();
        self.writer.write(&batch).await.map_err(err)
    }

    /// [`StreamedWriter::close`] on a task of its own, begun now: the calling thread
    /// goes on (with another range of files) while the last row group is encoded and
    /// the file written out and made durable (its fsync waits on the disk, 10-17 ms
    /// for a bronze batch's file: BENCHMARKS.md, "Bronze ingest: the batch
    /// boundaries"). The future gives what `close` gives.
    pub fn close_later(self) -> impl std::future::Future<Output = Result<(Vec<Add>, usize)>> {
        let path = self.append.path.clone();
        let task = tokio::spawn(self.close());
        async move {
            task.await.map_err(|e| {
                delta_error(
                    &path,
                    deltalake::DeltaTableError::Generic(format!("closing a Parquet file: {e}")),
                )
            })?
        }
    }

    /// Closes the writer: its files (not committed) and their rows.
    pub async fn close(self) -> Result<(Vec<Add>, usize)> {
        let adds = self
            .writer
            .close()
            .await
            .map_err(|e| delta_error(&self.append.path, e))?;
        Ok((adds, self.num_rows))
    }
}

impl DeltaSink {
    /// Creates the table, empty, by delta-rs's write of `schema` (a version without a
    /// txn), when it can take direct appends after (unpartitioned, not column-mapped,
    /// every column nullable): a first append big enough for parallel writers then
    /// takes them in the next version, with its txn (a batch stopped between the two
    /// commits is written again on restart). `false`: not created.
    async fn create_empty(&mut self, schema: &SchemaRef) -> Result<bool> {
        if self.table.version().is_some() || !self.can_create_empty(schema) {
            return Ok(false);
        }
        let empty = RecordBatch::new_empty(schema.clone());
        let mut write = self
            .table
            .clone()
            .write(vec![empty])
            .with_save_mode(SaveMode::Append);
        let configuration = self.creation_configuration();
        if !configuration.is_empty() {
            write = write.with_configuration(configuration);
        }
        self.table = write.await.map_err(|e| self.err(e))?;
        Ok(true)
    }

    /// Whether [`DeltaSink::create_empty`] creates a missing table for rows of `schema`.
    fn can_create_empty(&self, schema: &SchemaRef) -> bool {
        self.column_mapping.is_none()
            && self.partition_by.is_empty()
            && schema.fields().iter().all(|f| nullable_deep(f))
    }

    /// Starts a streamed append of batch `batch_id`, rows of `schema` (the flow's output):
    /// the rows are written by [`StreamedWriter`]s as they are produced, then committed
    /// by [`DeltaSink::commit_streamed_append`] with the batch's txn. `None` when this
    /// append cannot take the direct path ([`DeltaSink::direct_append_config`]: a table
    /// to create, evolve or check) or the table holds the batch already: the batch is
    /// then written by [`DeltaSink::add_batch`].
    ///
    /// `large`: a batch big enough for parallel writers; its table, when there is none
    /// yet, is created empty at the commit ([`DeltaSink::create_empty`], as for an
    /// ordinary large first append), once every file is written: a batch declined or
    /// failed before creates nothing. Column names Delta does not allow (without column
    /// mapping) leave the batch to `add_batch`, which refuses them.
    pub async fn begin_streamed_append(
        &mut self,
        batch_id: u64,
        schema: &SchemaRef,
        large: bool,
    ) -> Result<Option<StreamedAppend>> {
        if !self.idempotent {
            return Ok(None);
        }
        let columns = normalize_batch(&RecordBatch::new_empty(schema.clone()))?.schema();
        if !self.names_are_mapped() {
            // As `add_batch`: names Delta does not allow are refused there.
            if check_column_names(&self.path, &columns).is_err() {
                return Ok(None);
            }
        }
        if self.table.version().is_none() {
            // The table may have been created by a previous attempt of this batch.
            self.table = open_table(&self.path).await?;
        }
        if self.table.version().is_none() {
            // A new table: created at the commit (`create_empty`'s rules, checked now),
            // the files written for a fresh table's defaults.
            if !large || !self.can_create_empty(&columns) {
                return Ok(None);
            }
            let config = WriterConfig::new(
                columns.clone(),
                Vec::new(),
                Some(writer_properties()),
                Some(deltalake::table::config::DEFAULT_TARGET_FILE_SIZE),
                Some(WRITE_BATCH_ROWS),
                delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(
                    deltalake::table::config::DEFAULT_NUM_INDEX_COLS,
                ),
                None,
            );
            return Ok(Some(StreamedAppend {
                path: self.path.clone(),
                store: self.table.log_store().object_store(None),
                config,
                columns,
                create: true,
                started: std::time::Instant::now(),
            }));
        }
        self.settle_post_commit().await?;
        self.settle_checkpoint(false).await;
        // As in `add_batch`: the batch right after this sink's own append is not in the
        // table; any other is checked (and then left to `add_batch`, which skips it).
        let follows_own_append = self.appended.take().is_some_and(|b| b + 1 == batch_id);
        if !follows_own_append && self.already_committed(batch_id).await? {
            return Ok(None);
        }
        let Some((config, _)) = self.direct_append_config_for(&columns)? else {
            return Ok(None);
        };
        Ok(Some(StreamedAppend {
            path: self.path.clone(),
            store: self.table.log_store().object_store(None),
            config,
            columns,
            create: false,
            started: std::time::Instant::now(),
        }))
    }

    /// Commits a streamed append's files (in the rows' order) with batch `batch_id`'s txn.
    pub async fn commit_streamed_append(
        &mut self,
        append: &StreamedAppend,
        batch_id: u64,
        adds: Vec<Add>,
        num_rows: usize,
    ) -> Result<SinkCommit> {
        if append.create {
            // Another writer may have created the table meanwhile: the files must fit it.
            self.table = open_table(&self.path).await?;
            let fits = match self.table.version() {
                None => self.create_empty(&append.columns).await?,
                Some(_) => self
                    .direct_append_config_for(&append.columns)?
                    .is_some_and(|(config, _)| config.file_schema() == append.config.file_schema()),
            };
            if !fits {
                return Err(self.err(deltalake::DeltaTableError::Generic(format!(
                    "the table was created by another writer while batch {batch_id} was written, with other columns; \
                     nothing was committed, the batch runs again against it"
                ))));
            }
        } else if num_rows == 0 {
            // As `add_batch` does with no rows: nothing to commit (the table exists).
            return Ok(SinkCommit {
                num_output_rows: 0,
                delta_version: self.version(),
                skipped: false,
            });
        }
        self.commit_adds(batch_id, adds, num_rows, append.started)
            .await
    }
}

impl CommitOperation {
    /// The `commitInfo` of a commit of `actions` (its adds) holding `num_rows` rows:
    /// Databricks' `operationMetrics` of `COPY INTO` (`numFiles`, `numOutputRows`,
    /// `numOutputBytes`) added to the operation's own.
    fn commit_info(&self, actions: &[Action], num_rows: usize) -> deltalake::kernel::CommitInfo {
        let bytes: i64 = actions
            .iter()
            .map(|a| match a {
                Action::Add(add) => add.size,
                _ => 0,
            })
            .sum();
        let mut metrics = self.metrics.clone();
        metrics.insert("numFiles".into(), actions.len().into());
        metrics.insert("numOutputRows".into(), num_rows.into());
        metrics.insert("numOutputBytes".into(), bytes.into());
        let parameters = self
            .parameters
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(_) => v.clone(),
                    other => serde_json::Value::String(other.to_string()),
                };
                (k.clone(), v)
            })
            .collect();
        deltalake::kernel::CommitInfo {
            timestamp: Some(crate::clock::now_ms()),
            operation: Some(self.name.clone()),
            operation_parameters: Some(parameters),
            is_blind_append: Some(true),
            engine_info: Some(format!("weir {}", env!("CARGO_PKG_VERSION"))),
            info: [(
                "operationMetrics".to_owned(),
                serde_json::Value::Object(metrics),
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        }
    }
}

/// Where an `add` action's file is in the table's store: the action's `path` is a
/// relative URI (Delta protocol, "Add File and Remove File"), percent-encoded.
fn add_location(path: &str) -> object_store::path::Path {
    object_store::path::Path::from_url_path(path)
        .unwrap_or_else(|_| object_store::path::Path::from(path))
}

/// Rows below which an append is written by one Parquet writer: a second one would
/// only add a file.
const PARALLEL_APPEND_MIN_ROWS: usize = 131_072;

/// Whether an append is big enough to split between parallel writers: two cores or more,
/// two record batches or more, and [`PARALLEL_APPEND_MIN_ROWS`] rows.
fn parallel_sized(batches: &[RecordBatch], num_rows: usize) -> bool {
    let writers = std::thread::available_parallelism().map_or(1, |n| n.get());
    writers >= 2 && batches.len() >= 2 && num_rows >= PARALLEL_APPEND_MIN_ROWS
}

/// Writer features whose rules an append of rows that already fit the table's schema
/// meets without a check of its own (Delta protocol, "Table Features"): the others
/// (invariants, CHECK constraints, generated and identity columns, column mapping, row
/// tracking, in-commit timestamps, Iceberg compatibility, ...) go through delta-rs's write
/// operation, which checks them.
const APPEND_SAFE_WRITER_FEATURES: &[&str] = &[
    "appendOnly",
    "timestampNtz",
    "domainMetadata",
    "deletionVectors",
    "v2Checkpoint",
    "vacuumProtocolCheck",
    "changeDataFeed",
];

impl DeltaSink {
    /// The writer configuration for [`DeltaSink::direct_append`] when this append can
    /// take it: an existing, unpartitioned, not column-mapped table with no constraint,
    /// invariant, generated or identity column, whose columns the batch has exactly (names
    /// and types, in order; no null in a NOT NULL column). `None` otherwise: the append
    /// goes through delta-rs's write operation, which checks and evolves.
    fn direct_append_config(&self, batches: &[RecordBatch]) -> Result<Option<WriterConfig>> {
        let Some(first) = batches.first() else {
            return Ok(None);
        };
        let batch_schema = first.schema();
        if batches.iter().any(|b| b.schema() != batch_schema) {
            return Ok(None);
        }
        let Some((config, table_schema)) = self.direct_append_config_for(&batch_schema)? else {
            return Ok(None);
        };
        // A NOT NULL column takes the direct path when no batch has a null in it (the
        // check delta-rs's write makes; e.g. bronze's `_metadata.file_path`).
        let nulls_fit =
            table_schema.fields().iter().enumerate().all(|(i, f)| {
                f.is_nullable() || batches.iter().all(|b| b.column(i).null_count() == 0)
            });
        Ok(nulls_fit.then_some(config))
    }

    /// [`DeltaSink::direct_append_config`] for batches of `batch_schema`, with the
    /// table's schema; a NOT NULL column of the table is not checked for nulls here
    /// (the caller checks its rows, or `RecordBatch::try_new` on the table's schema does).
    fn direct_append_config_for(
        &self,
        batch_schema: &SchemaRef,
    ) -> Result<Option<(WriterConfig, SchemaRef)>> {
        if !self.partition_by.is_empty() || self.table.version().is_none() {
            return Ok(None);
        }
        let state = self.table.snapshot().map_err(|e| self.err(e))?;
        let metadata = state.metadata();
        let configuration = metadata.configuration();
        if !metadata.partition_columns().is_empty()
            || configuration.keys().any(|k| {
                k.starts_with("delta.constraints.")
                    || k == "delta.enableRowTracking"
                    || k == "delta.enableInCommitTimestamps"
                    || k.starts_with("delta.enableIcebergCompat")
            })
            || configuration
                .get("delta.columnMapping.mode")
                .is_some_and(|m| m != "none")
        {
            return Ok(None);
        }
        let protocol = serde_json::to_value(state.protocol()).unwrap_or_default();
        let writer_version = protocol["minWriterVersion"].as_i64().unwrap_or(i64::MAX);
        let features_safe = match protocol["writerFeatures"].as_array() {
            Some(features) => features.iter().all(|f| {
                f.as_str()
                    .is_some_and(|f| APPEND_SAFE_WRITER_FEATURES.contains(&f))
            }),
            None => writer_version <= 2,
        };
        if !features_safe {
            return Ok(None);
        }
        let table_schema = state.snapshot().arrow_schema();
        let fits = table_schema.fields().len() == batch_schema.fields().len()
            && table_schema
                .fields()
                .iter()
                .zip(batch_schema.fields())
                .all(|(t, b)| {
                    t.name() == b.name()
                        && t.data_type() == b.data_type()
                        && !t.metadata().keys().any(|k| {
                            k.starts_with("delta.invariants")
                                || k.starts_with("delta.generationExpression")
                                || k.starts_with("delta.identity")
                        })
                });
        // A NOT NULL field inside a column is left to delta-rs's write.
        let nested_nullable = table_schema
            .fields()
            .iter()
            .all(|f| nullable_deep(&Field::clone(f).with_nullable(true)));
        if !fits || !nested_nullable {
            return Ok(None);
        }
        let stats = WriterStatsConfig::from_config(state.snapshot().table_configuration());
        let config = WriterConfig::new(
            table_schema.clone(),
            Vec::new(),
            Some(writer_properties()),
            Some(state.snapshot().table_properties().target_file_size()),
            Some(WRITE_BATCH_ROWS),
            stats.num_indexed_cols,
            stats.stats_columns,
        );
        Ok(Some((config, table_schema)))
    }

    /// Appends the batch by delta-rs's `DeltaWriter` and `CommitBuilder`, the pieces of
    /// delta-rs's write operation without its DataFusion plan: a batch big enough
    /// ([`parallel_sized`]) takes one Parquet writer per core, each writing a contiguous
    /// part of the rows to files of its own, a smaller one a single writer. Every file is
    /// in one Delta commit with the batch's txn; the files' order in the commit is the
    /// rows' order, so a reader sees the rows as one writer would have written them.
    /// The method returns once the commit is in the log; deltalake's post-commit of it
    /// runs on ([`DeltaSink::settle`]).
    async fn direct_append(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
        num_rows: usize,
        config: WriterConfig,
    ) -> Result<SinkCommit> {
        let start = std::time::Instant::now();
        let writers = if parallel_sized(&batches, num_rows) {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        };
        // The table's own schema on the batches (the same columns and types; a column's
        // nullability or field metadata may differ, and the Parquet writer wants the
        // table's exactly). `try_new` checks again that no NOT NULL column holds a null.
        let file_schema = config.file_schema();
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(file_schema.clone(), b.columns().to_vec()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.err(e.into()))?;
        let store = self.table.log_store().object_store(None);
        let mut handles = Vec::new();
        // Each writer encodes on a blocking thread of its own, not on a runtime worker:
        // Parquet encoding holds a core for hundreds of ms, and the runtime's workers
        // (one per core) must stay free to drive the source's read-ahead, whose decode
        // then overlaps this encode instead of waiting for it (BENCHMARKS.md, "Bronze
        // ingest: encode off the runtime's workers").
        let runtime = tokio::runtime::Handle::current();
        for part in split_rows(batches, num_rows, writers) {
            let (store, config, runtime) = (store.clone(), config.clone(), runtime.clone());
            handles.push(tokio::task::spawn_blocking(move || {
                runtime.block_on(async move {
                    let began = std::time::Instant::now();
                    let mut writer = DeltaWriter::new(store, config);
                    for batch in &part {
                        writer.write(batch).await?;
                    }
                    let written = writer.close().await;
                    tracing::debug!(
                        batch_id,
                        ms = began.elapsed().as_millis() as u64,
                        "parquet writer part done"
                    );
                    written
                })
            }));
        }
        let mut adds: Vec<Add> = Vec::new();
        let mut failure = None;
        for handle in handles {
            match handle.await {
                Ok(Ok(written)) => adds.extend(written),
                Ok(Err(e)) => failure = failure.or(Some(self.err(e))),
                Err(e) => {
                    failure = failure.or(Some(self.err(deltalake::DeltaTableError::Generic(
                        format!("a Parquet writer task failed: {e}"),
                    ))))
                }
            }
        }
        // Files written by the other writers are in no commit: readers never see them.
        if let Some(e) = failure {
            return Err(e);
        }
        tracing::debug!(
            batch_id,
            ms = start.elapsed().as_millis() as u64,
            "parquet writers done"
        );
        self.commit_adds(batch_id, adds, num_rows, start).await
    }

    /// Commits files written for batch `batch_id` (`num_rows` rows, written since
    /// `start`) in one Delta commit with the batch's txn, their order kept.
    /// The files of `adds` that are not in the table's store (a HEAD each, concurrently).
    pub async fn missing_files(&self, adds: &[Add]) -> Result<Vec<String>> {
        let store = self.table.log_store().object_store(None);
        let heads = adds.iter().map(|add| {
            let store = store.clone();
            async move {
                let path = add_location(&add.path);
                match object_store::ObjectStoreExt::head(&store, &path).await {
                    Ok(_) => Ok(None),
                    Err(object_store::Error::NotFound { .. }) => Ok(Some(add.path.clone())),
                    Err(e) => Err(e),
                }
            }
        });
        let found = futures::future::join_all(heads).await;
        let mut missing = Vec::new();
        for f in found {
            match f {
                Ok(Some(path)) => missing.push(path),
                Ok(None) => {}
                Err(e) => {
                    return Err(self.err(deltalake::DeltaTableError::ObjectStore { source: e }));
                }
            }
        }
        Ok(missing)
    }

    async fn commit_adds(
        &mut self,
        batch_id: u64,
        adds: Vec<Add>,
        num_rows: usize,
        start: std::time::Instant,
    ) -> Result<SinkCommit> {
        crate::failpoint::pause("pause_before_sink_commit", batch_id).await;
        // Another tool's VACUUM (retention 0, or a full one) deletes data files that no
        // commit lists yet: this batch's, between their write and this commit. Adding
        // them anyway would commit files that do not exist, and every later read of the
        // table would fail (delta-io/delta-rs#3835). So each file is looked for first;
        // a missing one fails the write as transient, and the retry writes it again.
        let missing = self.missing_files(&adds).await?;
        if let Some(first) = missing.first() {
            return Err(self.err(deltalake::DeltaTableError::Generic(format!(
                "{} of the {} data file(s) written for batch {batch_id} were deleted before the commit \
                 that adds them (another tool's VACUUM with a short retention?), e.g. {first}; \
                 nothing was committed, and the batch is written again",
                missing.len(),
                adds.len()
            ))));
        }
        // The Delta kernel's transaction: no file list to keep (deltalake's post-commit
        // re-materialises it after every commit, a cost that grows with the table).
        let adds = Arc::new(adds);
        if self.operation.is_none() && self.kernel_commit(batch_id, adds.clone()).await? {
            self.appended = Some(batch_id);
            return Ok(SinkCommit {
                num_output_rows: num_rows as u64,
                delta_version: self.version(),
                skipped: false,
            });
        }
        let mut actions: Vec<Action> = Arc::unwrap_or_clone(adds)
            .into_iter()
            .map(Action::Add)
            .collect();
        let num_files = actions.len();
        if let Some(op) = &self.operation {
            actions.insert(0, Action::CommitInfo(op.commit_info(&actions, num_rows)));
        }
        // The commit info's `operationMetrics` as delta-rs's write operation records them.
        let metrics = serde_json::json!({
            "num_added_files": num_files,
            "num_removed_files": 0,
            "num_partitions": 0,
            "num_added_rows": num_rows,
            "execution_time_ms": start.elapsed().as_millis() as u64,
        });
        let mut commit = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, batch_id as i64))
            .with_cleanup_expired_logs(self.log_cleanup());
        // An operation of its own has its metrics in its commitInfo (app metadata would
        // override them).
        if self.operation.is_none() {
            commit = commit.with_metadata([("operationMetrics".to_owned(), metrics)]);
        }
        let operation = DeltaOperation::Write {
            mode: SaveMode::Append,
            partition_by: None,
            predicate: None,
        };
        self.catch_up_table().await?;
        let state = self.table.snapshot().map_err(|e| self.err(e))?;
        let committed = CommitBuilder::from(commit)
            .with_actions(actions)
            .build(
                Some(state as &dyn TableReference),
                self.table.log_store(),
                operation,
            )
            .into_prepared_commit_future()
            .await
            .map_err(|e| self.err(e))?
            .await
            .map_err(|e| self.err(e))?;
        // The version is in the log: readers see it now. deltalake's post-commit (the
        // writer's snapshot at this version, a checkpoint when due) runs while the engine
        // records the batch and plans the next; the next write waits for it.
        self.post_commit = Some(PendingPostCommit {
            version: committed.version as i64,
            task: tokio::spawn(committed.into_future()),
        });
        self.appended = Some(batch_id);
        Ok(SinkCommit {
            num_output_rows: num_rows as u64,
            delta_version: self.version(),
            skipped: false,
        })
    }

    /// Delta Lake's schema enforcement on append: a nullable column of the table that the
    /// batch does not have is written as null (e.g. a column another writer added), as
    /// Spark's Delta writer does. The batch's columns then follow the table's order. The
    /// batches are returned as they are when the table is new, when a missing column is
    /// NOT NULL, or when the batch has a column the table lacks (schema evolution, or the
    /// error that asks for `merge_schema`).
    fn with_missing_columns(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        let (Some(first), Ok(state)) = (batches.first(), self.table.snapshot()) else {
            return Ok(batches);
        };
        let table_schema = state.snapshot().arrow_schema();
        let schema = first.schema();
        let all_known = schema
            .fields()
            .iter()
            .all(|f| table_schema.field_with_name(f.name()).is_ok());
        let missing: Vec<&Field> = table_schema
            .fields()
            .iter()
            .filter(|f| schema.field_with_name(f.name()).is_err())
            .map(|f| f.as_ref())
            .collect();
        if missing.is_empty() || !all_known || missing.iter().any(|f| !f.is_nullable()) {
            return Ok(batches);
        }
        tracing::debug!(table = %self.path.display(),
            columns = ?missing.iter().map(|f| f.name()).collect::<Vec<_>>(),
            "the table has columns the batch does not: written as null");
        let fields: Vec<Field> = table_schema
            .fields()
            .iter()
            .map(|t| match schema.field_with_name(t.name()) {
                Ok(own) => own.clone(),
                Err(_) => Field::clone(t),
            })
            .collect();
        let filled = Arc::new(Schema::new(fields));
        batches
            .iter()
            .map(|b| {
                let columns = filled
                    .fields()
                    .iter()
                    .map(|f| match b.column_by_name(f.name()) {
                        Some(c) => c.clone(),
                        None => arrow::array::new_null_array(f.data_type(), b.num_rows()),
                    })
                    .collect();
                RecordBatch::try_new(filled.clone(), columns).map_err(|e| self.err(e.into()))
            })
            .collect()
    }

    /// Brings `table` (deltalake's view, with the file list) up to the commits this sink
    /// made through the kernel, for the paths that need the files.
    async fn catch_up_table(&mut self) -> Result<()> {
        let ahead = match (&self.kernel, self.table.version()) {
            (Some(k), Some(v)) => k.version() > v,
            _ => false,
        };
        if ahead {
            self.table
                .update_incremental(None)
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// The kernel snapshot at the table's latest version this sink knows (built once, then
    /// moved by each commit).
    async fn kernel_snapshot(&mut self) -> Result<delta_kernel::SnapshotRef> {
        let Some(version) = self.version() else {
            return Err(self.err(deltalake::DeltaTableError::NotATable(
                "no Delta table yet".into(),
            )));
        };
        let version = version as u64;
        if let Some(k) = &self.kernel
            && k.version() == version
        {
            return Ok(k.clone());
        }
        let log_store = self.table.log_store();
        let engine = log_store.engine(None);
        let root = log_store
            .transaction_url(None)
            .map_err(|e| self.err(e))?
            .to_string();
        let existing = self.kernel.clone();
        let built = tokio::task::spawn_blocking(move || {
            let builder = match existing {
                Some(k) if k.version() < version => delta_kernel::Snapshot::builder_from(k),
                _ => delta_kernel::Snapshot::builder_for(root),
            };
            builder.at_version(version).build(engine.as_ref())
        })
        .await
        .map_err(|e| self.kernel_error(format!("the snapshot task stopped: {e}")))?
        .map_err(|e| self.kernel_error(e.to_string()))?;
        self.kernel = Some(built.clone());
        Ok(built)
    }

    /// The table's metadata (schema, partition columns, properties, among them its
    /// constraints) and protocol, as JSON: what [`DeltaSink::direct_append_config`]
    /// decided the direct path on.
    fn table_rules(&self) -> Result<(serde_json::Value, serde_json::Value)> {
        let state = self.table.snapshot().map_err(|e| self.err(e))?;
        Ok((
            serde_json::to_value(state.metadata()).unwrap_or_default(),
            serde_json::to_value(state.protocol()).unwrap_or_default(),
        ))
    }

    fn kernel_error(&self, message: String) -> Error {
        self.err(deltalake::DeltaTableError::Generic(message))
    }

    /// Commits the files of a direct append in one Delta commit with the batch's `txn`,
    /// through the Delta kernel's transaction (the library deltalake commits through for
    /// its own blind appends, `BlindDeltaTable`). The commit needs the table's protocol,
    /// metadata and latest version, not its file list, so its cost does not grow with the
    /// table. When another writer committed in between (the version is taken), the table
    /// is read again and the commit retried, unless that writer changed the schema (the
    /// files were written for the old one: the batch fails and is run again).
    /// A checkpoint that falls due is written in the background.
    ///
    /// `false`: the kernel cannot commit to this table (a protocol feature it does not
    /// write, statistics it does not take); nothing was committed and the caller commits
    /// the files through deltalake instead.
    async fn kernel_commit(&mut self, batch_id: u64, adds: Arc<Vec<Add>>) -> Result<bool> {
        for _ in 0..KERNEL_COMMIT_ATTEMPTS {
            let snapshot = self.kernel_snapshot().await?;
            let engine = self.table.log_store().engine(None);
            let app_id = self.app_id.clone();
            let task_adds = adds.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                kernel_append(snapshot, engine, app_id, batch_id, &task_adds)
            })
            .await
            .map_err(|e| self.kernel_error(format!("the commit task stopped: {e}")))?;
            match outcome {
                KernelAppend::Unsupported(reason) => {
                    tracing::debug!(table = %self.path.display(), %reason,
                        "the Delta kernel cannot commit this append; committing through deltalake");
                    return Ok(false);
                }
                KernelAppend::Failed(message) => return Err(self.kernel_error(message)),
                KernelAppend::Committed(snapshot) => {
                    let version = snapshot.version();
                    self.kernel = Some(snapshot.clone());
                    self.checkpoint_if_due(snapshot).await;
                    tracing::debug!(table = %self.path.display(), version, batch_id, "committed");
                    return Ok(true);
                }
                KernelAppend::Conflict(version) => {
                    tracing::info!(table = %self.path.display(), version,
                        "another writer committed this version first; reading the table again");
                    let before = self.table_rules()?;
                    self.table
                        .update_incremental(None)
                        .await
                        .map_err(|e| self.err(e))?;
                    self.kernel = None;
                    if self.table_rules()? != before {
                        // The files were written, and found fit to commit directly, under
                        // the old rules: the batch runs again against the new ones.
                        return Err(self.err(deltalake::DeltaTableError::Generic(format!(
                            "another writer changed the table's schema, properties or protocol (e.g. a constraint or a \
                             column) at version {version} or before, while batch {batch_id} was written; nothing was \
                             committed, the batch runs again against the new table"
                        ))));
                    }
                }
            }
        }
        Err(self.kernel_error(format!(
            "other writers took the next version {KERNEL_COMMIT_ATTEMPTS} times in a row; nothing was committed, \
             and the batch runs again (a table written this often by other writers needs them to pause)"
        )))
    }

    /// Starts writing the Delta checkpoint of `snapshot`'s version when one is due there
    /// (`(version + 1) % delta.checkpointInterval == 0`, as deltalake and Delta Lake
    /// write them), then removes the log entries past `delta.logRetentionDuration` when
    /// `delta.enableExpiredLogCleanup` (Delta Lake's `MetadataCleanup` after a
    /// checkpoint). A previous checkpoint still running is waited for first.
    async fn checkpoint_if_due(&mut self, snapshot: delta_kernel::SnapshotRef) {
        let version = snapshot.version();
        let properties = snapshot.table_properties();
        let interval = properties
            .checkpoint_interval
            .map_or(100, std::num::NonZero::get);
        if !(version + 1).is_multiple_of(interval) {
            return;
        }
        self.settle_checkpoint(true).await;
        let cleanup = properties.enable_expired_log_cleanup.unwrap_or(true);
        let retention_ms = properties
            .log_retention_duration
            .map_or(30 * 24 * 3600 * 1000, |d| d.as_millis() as i64);
        let log_store = self.table.log_store();
        let task = tokio::spawn(async move {
            let engine = log_store.engine(None);
            tokio::task::spawn_blocking(move || snapshot.checkpoint(engine.as_ref(), None))
                .await
                .map_err(|e| format!("the checkpoint task stopped: {e}"))?
                .map_err(|e| e.to_string())?;
            if cleanup {
                let cutoff = chrono::Utc::now().timestamp_millis() - retention_ms;
                deltalake::protocol::checkpoints::cleanup_expired_logs_for(
                    version,
                    log_store.as_ref(),
                    cutoff,
                    None,
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        self.checkpoint = Some(PendingCheckpoint { version, task });
    }

    /// Whether the append's post-commit removes expired log entries: only with the commit
    /// that writes a checkpoint (every `delta.checkpointInterval` versions), as Delta Lake
    /// does (`MetadataCleanup` runs after a checkpoint), and then as the table's
    /// `delta.enableExpiredLogCleanup` says (`None`: delta-rs reads it). delta-rs would
    /// otherwise list the whole `_delta_log` after every commit, which grows with the
    /// log's retention (30 days by default). `None` for a table-to-be.
    fn log_cleanup(&self) -> Option<bool> {
        let state = self.table.snapshot().ok()?;
        let interval = state.table_config().checkpoint_interval().get();
        let version = state.version() + 1;
        if (version + 1).is_multiple_of(interval) {
            None
        } else {
            Some(false)
        }
    }

    /// Column-mapped table (delta-rs cannot evolve one yet): `true` when the batch's
    /// columns are all in the table (the append needs no schema change); an error
    /// naming the new columns otherwise.
    fn fits_table(&self, batch: Option<SchemaRef>) -> Result<bool> {
        let Some(batch) = batch else {
            return Ok(true);
        };
        let snapshot = self.table.snapshot().map_err(|e| self.err(e))?;
        let table = snapshot.schema();
        let new: Vec<String> = batch
            .fields()
            .iter()
            .filter(|f| table.field(f.name()).is_none())
            .map(|f| format!("`{}`", f.name()))
            .collect();
        if new.is_empty() {
            return Ok(true);
        }
        Err(Error::SinkSchemaMismatch {
            path: self.path.display().to_string(),
            message: format!(
                "new column(s) {} for a table with column mapping; deltalake (delta-rs) cannot add columns \
                 to a column-mapped table yet, so nothing was written. Add them to the table with Spark \
                 (ALTER TABLE ... ADD COLUMNS), or leave them out in the flow's `select`",
                new.join(", ")
            ),
        })
    }
}

/// What one kernel commit attempt came to.
enum KernelAppend {
    Committed(delta_kernel::SnapshotRef),
    /// The version was taken by another writer.
    Conflict(u64),
    /// The kernel cannot commit to this table; nothing was written to the log.
    Unsupported(String),
    Failed(String),
}

/// One attempt to commit `adds` with the txn (`app_id`, `batch_id`) on top of `snapshot`
/// (blocking I/O: run it off the async threads).
fn kernel_append(
    snapshot: delta_kernel::SnapshotRef,
    engine: Arc<dyn delta_kernel::Engine>,
    app_id: String,
    batch_id: u64,
    adds: &[Add],
) -> KernelAppend {
    use delta_kernel::transaction::CommitResult;
    let read_version = snapshot.version();
    let txn = snapshot
        .clone()
        .transaction(
            Box::new(delta_kernel::committer::FileSystemCommitter::new()),
            engine.as_ref(),
        )
        .map(|t| {
            t.with_operation("WRITE".to_owned())
                .with_engine_info(format!("weir {}", env!("CARGO_PKG_VERSION")))
                .with_transaction_id(app_id, batch_id as i64)
                .with_data_change(true)
        });
    let mut txn = match txn {
        Ok(txn) => txn,
        Err(e) => return KernelAppend::Unsupported(e.to_string()),
    };
    let files = match txn
        .stats_schema()
        .map_err(|e| e.to_string())
        .and_then(|schema| add_files_batch(adds, &schema))
    {
        Ok(files) => files,
        Err(e) => return KernelAppend::Unsupported(e),
    };
    txn.add_files(Box::new(
        delta_kernel::engine::arrow_data::ArrowEngineData::new(files),
    ));
    // An I/O error the kernel calls retryable: the same transaction again, a few times.
    for _ in 0..3 {
        match txn.commit(engine.as_ref()) {
            Ok(CommitResult::CommittedTransaction(committed)) => {
                let version = committed.commit_version();
                return match committed.post_commit_snapshot() {
                    Some(s) => KernelAppend::Committed(s.clone()),
                    None => match delta_kernel::Snapshot::builder_from(snapshot)
                        .at_version(version)
                        .build(engine.as_ref())
                    {
                        Ok(s) => KernelAppend::Committed(s),
                        Err(e) => KernelAppend::Failed(format!(
                            "version {version} is committed, but the table could not be read again: {e}"
                        )),
                    },
                };
            }
            Ok(CommitResult::ConflictedTransaction(c)) => {
                return KernelAppend::Conflict(c.conflict_version());
            }
            Ok(CommitResult::RetryableTransaction(r)) => {
                tracing::warn!(error = %r.error, "the Delta commit failed; trying again");
                txn = r.transaction;
            }
            Err(e) => {
                return KernelAppend::Failed(format!(
                    "the Delta commit after version {read_version} failed: {e}"
                ));
            }
        }
    }
    KernelAppend::Failed(format!(
        "the Delta commit after version {read_version} failed 3 times"
    ))
}

/// The kernel's add-files batch (`Transaction::add_files_schema`) for delta-rs's `add`
/// actions: path, partition values (none: the direct appends are unpartitioned), size,
/// modification time and the statistics, decoded from delta-rs's JSON into the table's
/// statistics schema (`Transaction::stats_schema`) by arrow-json.
fn add_files_batch(
    adds: &[Add],
    stats_schema: &delta_kernel::schema::StructType,
) -> std::result::Result<RecordBatch, String> {
    use arrow::array::{
        Array as _, Int64Array, MapBuilder, StringArray, StringBuilder, StructArray,
    };
    use delta_kernel::engine::arrow_conversion::TryIntoArrow as _;
    let stats_arrow: Schema = stats_schema.try_into_arrow().map_err(|e| e.to_string())?;
    let stats_fields = stats_arrow.fields().clone();
    let mut decoder = arrow::json::ReaderBuilder::new(Arc::new(stats_arrow))
        .with_batch_size(adds.len().max(1))
        .build_decoder()
        .map_err(|e| e.to_string())?;
    for add in adds {
        let line = add.stats.as_deref().unwrap_or("{}");
        decoder
            .decode(line.as_bytes())
            .and_then(|_| decoder.decode(b"\n"))
            .map_err(|e| format!("the statistics of {}: {e}", add.path))?;
    }
    let stats = match decoder.flush().map_err(|e| e.to_string())? {
        Some(batch) if batch.num_rows() == adds.len() => StructArray::from(batch),
        _ => return Err("the statistics did not decode to one row per file".into()),
    };
    let mut partitions = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for _ in adds {
        partitions.append(true).map_err(|e| e.to_string())?;
    }
    let partitions = partitions.finish();
    let schema = Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("partitionValues", partitions.data_type().clone(), false),
        Field::new("size", DataType::Int64, false),
        Field::new("modificationTime", DataType::Int64, false),
        Field::new("stats", DataType::Struct(stats_fields), true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from_iter_values(
                adds.iter().map(|a| a.path.as_str()),
            )),
            Arc::new(partitions),
            Arc::new(Int64Array::from_iter_values(adds.iter().map(|a| a.size))),
            Arc::new(Int64Array::from_iter_values(
                adds.iter().map(|a| a.modification_time),
            )),
            Arc::new(stats),
        ],
    )
    .map_err(|e| e.to_string())
}

/// Characters Delta forbids in column names without column mapping (Spark's
/// `INVALID_COLUMN_NAME_AS_PATH`: " ,;{}()\n\t=").
const FORBIDDEN_IN_NAMES: &[char] = &[' ', ',', ';', '{', '}', '(', ')', '\n', '\t', '='];

/// Refuses column names Delta cannot store without column mapping, before any data
/// file is written, naming every offending column (top level and nested).
pub(crate) fn check_column_names(path: &Path, schema: &Schema) -> Result<()> {
    fn walk(prefix: &str, fields: &arrow::datatypes::Fields, bad: &mut Vec<String>) {
        for f in fields {
            let name = if prefix.is_empty() {
                f.name().clone()
            } else {
                format!("{prefix}.{}", f.name())
            };
            if f.name().contains(FORBIDDEN_IN_NAMES) {
                bad.push(format!("`{name}`"));
            }
            if let DataType::Struct(inner) = f.data_type() {
                walk(&name, inner, bad);
            }
        }
    }
    let mut bad = Vec::new();
    walk("", schema.fields(), &mut bad);
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::SinkSchemaMismatch {
        path: path.display().to_string(),
        message: format!(
            "column name(s) {} contain characters Delta does not allow without column mapping \
             (space , ; {{ }} ( ) newline tab =); nothing was written. Either set \
             column_mapping_mode = \"name\" on the sink (Delta's delta.columnMapping.mode; only when \
             the sink creates the table), or rename them in the flow's `select`, \
             e.g. \"\\\"order id\\\" AS order_id\"",
            bad.join(", ")
        ),
    })
}

/// Maps a type to the one Delta stores for it.
/// Whether a field and every field inside it may hold nulls.
fn nullable_deep(field: &Field) -> bool {
    field.is_nullable()
        && match field.data_type() {
            DataType::Struct(fields) => fields.iter().all(|f| nullable_deep(f)),
            DataType::List(item) | DataType::LargeList(item) => nullable_deep(item),
            DataType::Map(entries, _) => match entries.data_type() {
                // A map's key is never null (Delta and Arrow); its value may be.
                DataType::Struct(kv) => kv.iter().skip(1).all(|f| nullable_deep(f)),
                _ => false,
            },
            _ => true,
        }
}

/// Splits batches into `parts` contiguous runs of about equal rows (batch boundaries
/// kept; a part may be empty when there are fewer batches than parts, and is dropped).
fn split_rows(batches: Vec<RecordBatch>, num_rows: usize, parts: usize) -> Vec<Vec<RecordBatch>> {
    let per_part = num_rows.div_ceil(parts.max(1)).max(1);
    let mut out: Vec<Vec<RecordBatch>> = vec![Vec::new()];
    let mut rows_in_part = 0;
    for batch in batches {
        if rows_in_part >= per_part && out.len() < parts {
            out.push(Vec::new());
            rows_in_part = 0;
        }
        rows_in_part += batch.num_rows();
        if let Some(part) = out.last_mut() {
            part.push(batch);
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

pub fn delta_type(dt: &DataType) -> DataType {
    match dt {
        DataType::Timestamp(_, Some(_)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        DataType::Timestamp(_, None) => DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Date64 => DataType::Date32,
        DataType::Dictionary(_, value) => delta_type(value),
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Float16 => DataType::Float32,
        DataType::Null => DataType::Utf8,
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| Arc::new(Field::new(f.name(), delta_type(f.data_type()), true)))
                .collect(),
        ),
        DataType::List(f) | DataType::LargeList(f) | DataType::ListView(f) => DataType::List(
            Arc::new(Field::new(f.name(), delta_type(f.data_type()), true)),
        ),
        other => other.clone(),
    }
}

/// Casts a batch's columns to Delta-storable types; a no-op when they already are.
pub fn normalize_batch(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    if schema
        .fields()
        .iter()
        .all(|f| &delta_type(f.data_type()) == f.data_type())
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let target = delta_type(field.data_type());
        if &target == field.data_type() {
            columns.push(column.clone());
        } else {
            columns.push(cast(column, &target).map_err(|source| Error::Arrow {
                context: format!("casting column {} to {target} for Delta", field.name()),
                source,
            })?);
        }
        fields.push(Field::new(field.name(), target, true));
    }
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    RecordBatch::try_new(schema, columns).map_err(|source| Error::Arrow {
        context: "normalising a batch for Delta".into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let ids: Vec<i64> = (from..from + rows).collect();
        let names: Vec<String> = ids.iter().map(|i| format!("row-{i}")).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids)),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap()
    }

    /// The data files of commit `version`, in the order the commit lists them.
    fn commit_files(table: &Path, version: u64) -> Vec<PathBuf> {
        let log = table.join(format!("_delta_log/{version:020}.json"));
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|a| a["add"]["path"].as_str().map(|p| table.join(p)))
            .collect()
    }

    fn ids_of(files: &[PathBuf]) -> Vec<i64> {
        let mut ids = Vec::new();
        for file in files {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
                std::fs::File::open(file).unwrap(),
                8192,
            )
            .unwrap();
            for b in reader {
                let b = b.unwrap();
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.extend(col.values().iter().copied());
            }
        }
        ids
    }

    #[test]
    fn split_rows_keeps_order_and_balances() {
        let batches: Vec<RecordBatch> = (0..5).map(|i| batch(i * 10, 10)).collect();
        let parts = split_rows(batches, 50, 2);
        assert_eq!(parts.len(), 2);
        let rows: Vec<usize> = parts
            .iter()
            .map(|p| p.iter().map(RecordBatch::num_rows).sum())
            .collect();
        assert_eq!(rows, vec![30, 20]);
        let firsts: Vec<i64> = parts
            .iter()
            .flatten()
            .map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .value(0)
            })
            .collect();
        assert_eq!(firsts, vec![0, 10, 20, 30, 40]);
        // Fewer batches than parts: no empty part.
        assert_eq!(split_rows(vec![batch(0, 3)], 3, 4).len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_first_append_creates_the_table_then_takes_the_parallel_writers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut sink = DeltaSink::open(&path, Vec::new(), true, "q").await.unwrap();
        let batches: Vec<RecordBatch> = (0..4).map(|i| batch(i * 40_000, 40_000)).collect();
        let commit = sink
            .add_batch(0, batches.clone(), false, None)
            .await
            .unwrap();
        assert_eq!(commit.num_output_rows, 160_000);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return;
        }
        // Version 0 creates the table with no rows and no txn; version 1 holds the rows
        // and the batch's txn, written by more than one writer.
        assert_eq!(commit.delta_version, Some(1));
        assert!(commit_files(&path, 0).is_empty());
        let log0 =
            std::fs::read_to_string(path.join("_delta_log/00000000000000000000.json")).unwrap();
        assert!(
            log0.contains("metaData") && !log0.contains("\"txn\""),
            "{log0}"
        );
        let files = commit_files(&path, 1);
        assert!(files.len() >= 2, "{files:?}");
        assert_eq!(ids_of(&files), (0..160_000).collect::<Vec<i64>>());
        assert_eq!(
            crate::delta::txn_version(&path, "q").await.unwrap(),
            Some(0)
        );
        // Stopped between the two commits: the table exists with no rows and no txn, and
        // the batch run again writes its rows once.
        let dir2 = tempfile::tempdir().unwrap();
        let path2 = dir2.path().join("t");
        let created = DeltaSink::open(&path2, Vec::new(), true, "q")
            .await
            .unwrap();
        created
            .table
            .clone()
            .write(vec![RecordBatch::new_empty(batches[0].schema())])
            .await
            .unwrap();
        let mut restarted = DeltaSink::open(&path2, Vec::new(), true, "q")
            .await
            .unwrap();
        let commit = restarted.add_batch(0, batches, false, None).await.unwrap();
        assert!(!commit.skipped);
        assert_eq!(commit.delta_version, Some(1));
        assert_eq!(
            ids_of(&commit_files(&path2, 1)),
            (0..160_000).collect::<Vec<i64>>()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_append_is_written_by_parallel_writers_in_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut sink = DeltaSink::open(&path, Vec::new(), true, "q").await.unwrap();
        // Batch 0 creates the table through delta-rs's write operation.
        sink.add_batch(0, vec![batch(-10, 10)], false, None)
            .await
            .unwrap();
        let batches: Vec<RecordBatch> = (0..8).map(|i| batch(i * 40_000, 40_000)).collect();
        let parallel = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
        assert!(sink.direct_append_config(&batches).unwrap().is_some());
        assert_eq!(parallel_sized(&batches, 320_000), parallel);
        let commit = sink
            .add_batch(1, batches.clone(), false, None)
            .await
            .unwrap();
        assert_eq!(commit.num_output_rows, 320_000);
        assert_eq!(commit.delta_version, Some(1));
        let files = commit_files(&path, 1);
        if parallel {
            assert!(files.len() >= 2, "{files:?}");
        }
        // Every row once, in the batch's order when the files are read in commit order.
        assert_eq!(ids_of(&files), (0..320_000).collect::<Vec<i64>>());
        // The commit records the batch's txn: a replay writes nothing.
        assert_eq!(
            crate::delta::txn_version(&path, "q").await.unwrap(),
            Some(1)
        );
        let replay = sink.add_batch(1, batches, false, None).await.unwrap();
        assert!(replay.skipped);
        let reopened = open_table(&path).await.unwrap();
        assert_eq!(reopened.version(), Some(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_the_parallel_writers_cannot_check_go_through_the_write_operation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut sink = DeltaSink::open(&path, Vec::new(), true, "q").await.unwrap();
        sink.add_batch(0, vec![batch(0, 10)], false, None)
            .await
            .unwrap();
        let big: Vec<RecordBatch> = (0..4).map(|i| batch(i * 50_000, 50_000)).collect();
        // A batch whose columns differ from the table's (a new column to merge).
        let wider: Vec<RecordBatch> = big
            .iter()
            .map(|b| {
                let mut fields = b.schema().fields().to_vec();
                fields.push(Arc::new(Field::new("extra", DataType::Int64, true)));
                let mut cols = b.columns().to_vec();
                cols.push(b.column(0).clone());
                RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
            })
            .collect();
        assert!(sink.direct_append_config(&wider).unwrap().is_none());
        // Too few rows to split: one writer, still the direct path.
        let small = [batch(0, 10), batch(10, 10)];
        assert!(sink.direct_append_config(&small).unwrap().is_some());
        assert!(!parallel_sized(&small, 20));
        // A partitioned sink.
        let mut partitioned =
            DeltaSink::open(&dir.path().join("p"), vec!["name".into()], false, "q")
                .await
                .unwrap();
        partitioned
            .add_batch(0, vec![batch(0, 10)], false, None)
            .await
            .unwrap();
        assert!(partitioned.direct_append_config(&big).unwrap().is_none());
        // The wider append still works, through delta-rs's write (merge_schema).
        let commit = sink.add_batch(1, wider, false, None).await.unwrap();
        assert_eq!(commit.num_output_rows, 200_000);
    }

    /// A sink (query id `q`) on `<dir>/t`, a table made elsewhere (deltalake's create)
    /// with columns `id` (NOT NULL unless `id_nullable`) and `name`, and the given
    /// `delta.checkpointInterval`.
    async fn sink_on_new_table(
        id_nullable: bool,
        checkpoint_interval: Option<&str>,
    ) -> (tempfile::TempDir, DeltaSink) {
        use deltalake::kernel::{DataType as DeltaType, StructField};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut create = open_table(&path).await.unwrap().create().with_columns([
            StructField::new("id", DeltaType::LONG, id_nullable),
            StructField::new("name", DeltaType::STRING, true),
        ]);
        if let Some(interval) = checkpoint_interval {
            create = create.with_configuration_property(
                deltalake::TableProperty::CheckpointInterval,
                Some(interval),
            );
        }
        create.await.unwrap();
        let sink = DeltaSink::open(&path, Vec::new(), false, "q")
            .await
            .unwrap();
        (dir, sink)
    }

    async fn sink_on_table_with_checkpoint_interval_5() -> (tempfile::TempDir, DeltaSink) {
        sink_on_new_table(true, Some("5")).await
    }

    /// The `add` actions' `stats` of commit `version`, parsed.
    fn commit_stats(table: &Path, version: u64) -> Vec<serde_json::Value> {
        let log =
            std::fs::read_to_string(table.join(format!("_delta_log/{version:020}.json"))).unwrap();
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|a| a["add"]["stats"].as_str().map(str::to_owned))
            .map(|s| serde_json::from_str(&s).unwrap())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_appends_commit_through_the_kernel_without_the_file_list_and_checkpoint_when_due()
    {
        let (dir, mut sink) = sink_on_table_with_checkpoint_interval_5().await;
        let path = dir.path().join("t");
        assert!(sink.direct_append_config(&[batch(0, 5)]).unwrap().is_some());
        for b in 0..4u64 {
            let commit = sink
                .add_batch(b, vec![batch(b as i64 * 5, 5)], false, None)
                .await
                .unwrap();
            assert_eq!(commit.delta_version, Some(b as i64 + 1));
            assert_eq!(sink.version(), Some(b as i64 + 1));
            assert_eq!(
                ids_of(&commit_files(&path, b + 1)),
                (b as i64 * 5..b as i64 * 5 + 5).collect::<Vec<i64>>()
            );
            assert_eq!(
                crate::delta::txn_version(&path, "q").await.unwrap(),
                Some(b as i64)
            );
            // delta-rs's statistics, carried into the kernel's `add` action.
            let stats = commit_stats(&path, b + 1);
            assert_eq!(stats.len(), 1);
            assert_eq!(stats[0]["numRecords"], 5);
            assert_eq!(stats[0]["minValues"]["id"], b * 5);
            assert_eq!(stats[0]["maxValues"]["id"], b * 5 + 4);
            assert_eq!(stats[0]["nullCount"]["name"], 0);
        }
        // The commits never loaded the table's file list: deltalake's view is still the
        // version the sink opened.
        assert_eq!(sink.table.version(), Some(0));
        sink.settle().await.unwrap();
        assert!(
            path.join("_delta_log/00000000000000000004.checkpoint.parquet")
                .exists(),
            "the checkpoint due at version 4 is written in the background"
        );
        // A replay is found in the log (the table is read again) and skipped.
        let replay = sink
            .add_batch(3, vec![batch(15, 5)], false, None)
            .await
            .unwrap();
        assert!(replay.skipped);
        // A second reader: deltalake from the checkpoint, every row once.
        let reopened = open_table(&path).await.unwrap();
        assert_eq!(reopened.version(), Some(4));
        assert_eq!(reopened.snapshot().unwrap().log_data().num_files(), 4);
        let files: Vec<PathBuf> = (1..=4).flat_map(|v| commit_files(&path, v)).collect();
        assert_eq!(ids_of(&files), (0..20).collect::<Vec<i64>>());
    }

    /// Whether commit `version` went through the Delta kernel (its `commitInfo`).
    fn kernel_committed(table: &Path, version: u64) -> bool {
        std::fs::read_to_string(table.join(format!("_delta_log/{version:020}.json")))
            .unwrap()
            .contains("\"kernelVersion\"")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_constraint_another_writer_adds_fails_the_batch_then_is_enforced() {
        let (dir, mut sink) = sink_on_table_with_checkpoint_interval_5().await;
        let path = dir.path().join("t");
        sink.add_batch(0, vec![batch(0, 5)], false, None)
            .await
            .unwrap();
        assert!(kernel_committed(&path, 1));
        // Another writer adds a CHECK constraint the next batch breaks.
        open_table(&path)
            .await
            .unwrap()
            .add_constraint()
            .with_constraint("id_small", "id < 100")
            .await
            .unwrap();
        let err = sink
            .add_batch(1, vec![batch(500, 2)], false, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("changed the table"), "{err}");
        // Run again, the batch is checked against the constraint, and refused.
        let again = sink.add_batch(1, vec![batch(500, 2)], false, None).await;
        assert!(again.is_err(), "the constraint holds");
        assert_eq!(
            crate::delta::txn_version(&path, "q").await.unwrap(),
            Some(0)
        );
        let reopened = open_table(&path).await.unwrap();
        assert_eq!(reopened.version(), Some(2));
        assert_eq!(reopened.snapshot().unwrap().log_data().num_files(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_column_another_writer_adds_is_written_as_null() {
        let (dir, mut sink) = sink_on_table_with_checkpoint_interval_5().await;
        let path = dir.path().join("t");
        sink.add_batch(0, vec![batch(0, 5)], false, None)
            .await
            .unwrap();
        // Another writer appends rows with a new column (schema evolution).
        let wider = {
            let b = batch(100, 2);
            let mut fields: Vec<Field> = b
                .schema()
                .fields()
                .iter()
                .map(|f| Field::clone(f))
                .collect();
            fields.push(Field::new("extra", DataType::Utf8, true));
            let mut columns = b.columns().to_vec();
            columns.push(Arc::new(StringArray::from(vec!["x", "y"])));
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
        };
        open_table(&path)
            .await
            .unwrap()
            .write(vec![wider])
            .with_save_mode(SaveMode::Append)
            .with_schema_mode(SchemaMode::Merge)
            .await
            .unwrap();
        // The sink's batches have no `extra`: the first meets the other writer's version
        // (the schema changed) and fails before committing; run again, it is appended
        // with `extra` null, as Spark's Delta writer does.
        assert!(
            sink.add_batch(1, vec![batch(5, 5)], false, None)
                .await
                .is_err()
        );
        let commit = sink
            .add_batch(1, vec![batch(5, 5)], false, None)
            .await
            .unwrap();
        assert_eq!(commit.num_output_rows, 5);
        sink.add_batch(2, vec![batch(10, 5)], false, None)
            .await
            .unwrap();
        let mut ids = Vec::new();
        for v in 3..=4 {
            for file in commit_files(&path, v) {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        std::fs::File::open(&file).unwrap(),
                    )
                    .unwrap()
                    .build()
                    .unwrap();
                for b in reader {
                    let b = b.unwrap();
                    let extra = b
                        .column_by_name("extra")
                        .expect("the table's column is written");
                    assert_eq!(extra.null_count(), b.num_rows());
                    ids.extend(
                        b.column(0)
                            .as_any()
                            .downcast_ref::<Int64Array>()
                            .unwrap()
                            .values()
                            .iter()
                            .copied(),
                    );
                }
            }
        }
        assert_eq!(ids, (5..15).collect::<Vec<i64>>());
        assert_eq!(
            crate::delta::txn_version(&path, "q").await.unwrap(),
            Some(2)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_not_null_column_without_nulls_takes_the_kernel_commit() {
        let (dir, mut sink) = sink_on_new_table(false, None).await;
        let path = dir.path().join("t");
        // The batch declares `id` nullable, but holds no null: the direct path, with the
        // table's schema on the batch.
        sink.add_batch(0, vec![batch(0, 5)], false, None)
            .await
            .unwrap();
        assert!(kernel_committed(&path, 1));
        // A null in the NOT NULL column: delta-rs's write checks it and refuses the batch.
        let with_null = RecordBatch::try_new(
            batch(0, 1).schema(),
            vec![
                Arc::new(Int64Array::from(vec![None, Some(7)])),
                Arc::new(StringArray::from(vec!["a", "b"])),
            ],
        )
        .unwrap();
        assert!(
            sink.direct_append_config(std::slice::from_ref(&with_null))
                .unwrap()
                .is_none()
        );
        assert!(
            sink.add_batch(1, vec![with_null], false, None)
                .await
                .is_err()
        );
        assert_eq!(open_table(&path).await.unwrap().version(), Some(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_another_writer_took_first_is_retried_at_the_next_version() {
        let (dir, mut sink) = sink_on_table_with_checkpoint_interval_5().await;
        let path = dir.path().join("t");
        sink.add_batch(0, vec![batch(0, 5)], false, None)
            .await
            .unwrap();
        // Another writer appends version 2 behind the sink's back.
        open_table(&path)
            .await
            .unwrap()
            .write(vec![batch(100, 3)])
            .with_save_mode(SaveMode::Append)
            .await
            .unwrap();
        let commit = sink
            .add_batch(1, vec![batch(5, 5)], false, None)
            .await
            .unwrap();
        assert_eq!(commit.delta_version, Some(3));
        assert_eq!(
            ids_of(&commit_files(&path, 3)),
            (5..10).collect::<Vec<i64>>()
        );
        assert_eq!(
            crate::delta::txn_version(&path, "q").await.unwrap(),
            Some(1)
        );
        let reopened = open_table(&path).await.unwrap();
        assert_eq!(reopened.snapshot().unwrap().log_data().num_files(), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_a_stopped_post_commit_missed_is_written_when_the_sink_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut table = open_table(&path).await.unwrap();
        // Versions 0-4 of a table with a checkpoint every 5 versions, committed without
        // their post-commit's checkpoint (as when the process stopped during it).
        for b in 0..5 {
            let mut write = table
                .write(vec![batch(b * 5, 5)])
                .with_commit_properties(CommitProperties::default().with_create_checkpoint(false));
            if b == 0 {
                write = write.with_configuration([(
                    "delta.checkpointInterval".to_string(),
                    Some("5".to_string()),
                )]);
            }
            table = write.await.unwrap();
        }
        let checkpoint = path.join("_delta_log/00000000000000000004.checkpoint.parquet");
        assert!(!checkpoint.exists());
        let sink = DeltaSink::open(&path, Vec::new(), false, "q")
            .await
            .unwrap();
        assert!(
            checkpoint.exists(),
            "the sink writes the checkpoint that is due"
        );
        drop(sink);
        // Opened again: the checkpoint is there, nothing more is written.
        DeltaSink::open(&path, Vec::new(), false, "q")
            .await
            .unwrap();
        let checkpoints = std::fs::read_dir(path.join("_delta_log"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".checkpoint.")
            })
            .count();
        assert_eq!(checkpoints, 1);
    }
}
