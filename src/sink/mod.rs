//! Sinks: where a flow's batches go.
//!
//! Every sink is idempotent per batch id, which is what turns the engine's
//! at-least-once replay into exactly-once output:
//!
//! - [`delta`]: one Delta commit per batch carrying an application transaction
//!   (app id = the query id, version = the batch id). A replayed batch whose
//!   version the table already records for that app id is skipped.
//! - [`postgres`]: one transaction per batch holding a marker row (query id, batch id)
//!   in the target database's `weir_sink_commits`; a replayed batch whose marker is
//!   there is skipped.
//! - [`memory`]: keeps batches in the process (tests); skips batch ids it already holds.
//! - [`console`]: prints batches to stderr (debugging); no guarantee.

pub mod console;
pub mod delta;
pub mod memory;
pub mod merge;
pub mod postgres;
pub mod quarantine;

use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::spec::SinkSpec;

/// What a sink did with one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkCommit {
    pub num_output_rows: u64,
    /// Delta table version written (or found, when skipped).
    pub delta_version: Option<i64>,
    /// The batch had been committed before (a replay after a crash); nothing written.
    pub skipped: bool,
}

pub enum Sink {
    Delta(delta::DeltaSink),
    /// A Delta table upserted on keys.
    DeltaMerge {
        table: delta::DeltaSink,
        keys: Vec<String>,
        order_by: Option<String>,
        null_safe_keys: bool,
    },
    Memory(memory::MemorySink),
    Console(console::ConsoleSink),
    Postgres(Box<postgres::PostgresSink>),
}

impl Sink {
    /// Opens the sink of a flow; `app_id` is the query id from the checkpoint.
    pub async fn open(spec: &SinkSpec, app_id: &str) -> Result<Self> {
        Ok(match spec {
            SinkSpec::Delta {
                path,
                partition_by,
                merge_schema,
                idempotent,
                column_mapping_mode,
                table_properties,
                ..
            } => Sink::Delta(
                delta::DeltaSink::open(path, partition_by.clone(), *merge_schema, app_id)
                    .await?
                    .idempotent(*idempotent)
                    .column_mapping(*column_mapping_mode)
                    .table_properties(table_properties),
            ),
            SinkSpec::DeltaMerge {
                path,
                keys,
                order_by,
                partition_by,
                null_safe_keys,
                table_properties,
                ..
            } => Sink::DeltaMerge {
                table: delta::DeltaSink::open(path, partition_by.clone(), false, app_id)
                    .await?
                    .table_properties(table_properties),
                keys: keys.clone(),
                order_by: order_by.clone(),
                null_safe_keys: *null_safe_keys,
            },
            SinkSpec::Postgres {
                url,
                table,
                keys,
                order_by,
            } => Sink::Postgres(Box::new(
                postgres::PostgresSink::open(url, table, keys.clone(), order_by.clone(), app_id)
                    .await?,
            )),
            SinkSpec::Memory { name } => Sink::Memory(memory::MemorySink::named(name)),
            SinkSpec::Console { num_rows } => Sink::Console(console::ConsoleSink::new(*num_rows)),
        })
    }

    /// Writes batch `batch_id`, at most once.
    pub async fn add_batch(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
    ) -> Result<SinkCommit> {
        self.add_batch_mode(batch_id, batches, false, None).await
    }

    /// Writes batch `batch_id`, at most once; `overwrite` replaces the table's content
    /// (output mode complete); `schema` is the flow's output schema (it creates a
    /// Delta table on an empty first batch).
    pub async fn add_batch_mode(
        &mut self,
        batch_id: u64,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        schema: Option<&arrow::datatypes::SchemaRef>,
    ) -> Result<SinkCommit> {
        match self {
            Sink::Delta(s) => s.add_batch(batch_id, batches, overwrite, schema).await,
            Sink::DeltaMerge {
                table,
                keys,
                order_by,
                null_safe_keys,
            } => {
                table
                    .merge_batch(
                        batch_id,
                        batches,
                        keys,
                        order_by.as_deref(),
                        *null_safe_keys,
                        schema,
                    )
                    .await
            }
            Sink::Postgres(s) => s.add_batch(batch_id, batches, overwrite, schema).await,
            Sink::Memory(s) => s.add_batch(batch_id, batches),
            Sink::Console(s) => s.add_batch(batch_id, batches),
        }
    }

    pub fn description(&self) -> String {
        match self {
            Sink::Delta(s) => s.description(),
            Sink::DeltaMerge { table, keys, .. } => {
                format!(
                    "DeltaMergeSink[{}, keys={}]",
                    table.path().display(),
                    keys.join(",")
                )
            }
            Sink::Postgres(s) => s.description(),
            Sink::Memory(s) => format!("MemorySink[{}]", s.name()),
            Sink::Console(_) => "ConsoleSink".into(),
        }
    }

    /// Waits for the Delta sink's post-commit of its last append, if one still runs
    /// ([`delta::DeltaSink::settle`]).
    pub async fn settle(&mut self) -> Result<()> {
        match self {
            Sink::Delta(s) | Sink::DeltaMerge { table: s, .. } => s.settle().await,
            Sink::Memory(_) | Sink::Console(_) | Sink::Postgres(_) => Ok(()),
        }
    }

    /// The latest Delta version, when the sink is a Delta table that exists.
    pub fn delta_version(&self) -> Option<i64> {
        match self {
            Sink::Delta(s) | Sink::DeltaMerge { table: s, .. } => s.version(),
            _ => None,
        }
    }
}
