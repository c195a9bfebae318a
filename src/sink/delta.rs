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
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;

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
    table: DeltaTable,
    /// The batch this sink appended last, when its own write succeeded in this process
    /// (see [`DeltaSink::add_batch`]).
    appended: Option<u64>,
}

impl DeltaSink {
    pub async fn open(
        path: &Path,
        partition_by: Vec<String>,
        merge_schema: bool,
        app_id: &str,
    ) -> Result<Self> {
        let table = open_table(path).await?;
        Ok(DeltaSink {
            path: path.to_path_buf(),
            partition_by,
            merge_schema,
            app_id: app_id.to_string(),
            idempotent: true,
            column_mapping: None,
            table,
            appended: None,
        })
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
        snapshot
            .metadata()
            .configuration()
            .get("delta.columnMapping.mode")
            .filter(|m| m.as_str() != "none")
            .cloned()
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

    pub fn version(&self) -> Option<i64> {
        self.table.version().map(|v| v as i64)
    }

    fn err(&self, source: deltalake::DeltaTableError) -> Error {
        delta_error(&self.path, source)
    }

    /// Loads the table's latest version and says whether it records batch `batch_id` of
    /// this app id already (Delta `txn`: a replay after a crash).
    async fn already_committed(&mut self, batch_id: u64) -> Result<bool> {
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
        let creating = self.table.version().is_none();
        // delta-rs cannot evolve a column-mapped table: merge only when it is not one.
        let merge = self.merge_schema
            && !(mapped && !creating && self.fits_table(batches.first().map(|b| b.schema()))?);
        let commit = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, batch_id as i64));
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
        if let (true, Some(mode)) = (creating, self.column_mapping) {
            builder = builder.with_configuration([(
                "delta.columnMapping.mode".to_string(),
                Some(mode.as_str().to_string()),
            )]);
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

impl DeltaSink {
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
