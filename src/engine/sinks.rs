//! Where a flow's batches are written: its sink and the Delta tables beside it (late
//! rows, quarantined records). Each is opened on its first write (a flow that never
//! runs a batch creates no table), and every commit carries the flow's application
//! transaction (app id = query id, version = batch id), so a batch re-run after a
//! crash is written at most once.

use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::retry::Retry;
use crate::error::Result;
use crate::sink::delta::StreamedAppend;
use crate::sink::{Sink, SinkCommit};
use crate::spec::HealthConfig;
use crate::spec::SinkSpec;
use deltalake::kernel::Add;

/// A flow's sink and side tables.
pub struct Sinks {
    spec: SinkSpec,
    app_id: String,
    retry: HealthConfig,
    sink: Option<Sink>,
    /// Side tables by path: `late_rows`, `bad_records_table`.
    side: Vec<(PathBuf, Sink)>,
}

impl Sinks {
    /// `app_id` is the query id (checkpoint `metadata`); `retry` the flow's retry budget.
    pub fn new(spec: &SinkSpec, app_id: &str, retry: &HealthConfig) -> Self {
        Sinks {
            spec: spec.clone(),
            app_id: app_id.to_string(),
            retry: retry.clone(),
            sink: None,
            side: Vec::new(),
        }
    }

    async fn sink(&mut self) -> Result<&mut Sink> {
        let sink = match self.sink.take() {
            Some(sink) => sink,
            None => {
                let mut retry = Retry::new(&self.retry, "open the sink");
                loop {
                    match Sink::open(&self.spec, &self.app_id).await {
                        Ok(s) => break s,
                        Err(e) if retry.again(&e).await => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        };
        Ok(self.sink.insert(sink))
    }

    /// Writes batch `batch_id` to the sink, at most once, retrying transient errors;
    /// `overwrite` replaces the table's content (output mode complete).
    pub async fn write(
        &mut self,
        batch_id: u64,
        rows: Vec<RecordBatch>,
        overwrite: bool,
        schema: &SchemaRef,
    ) -> Result<SinkCommit> {
        let retry_config = self.retry.clone();
        let sink = self.sink().await?;
        let mut retry = Retry::new(&retry_config, "write the batch to the sink");
        loop {
            match sink
                .add_batch_mode(batch_id, rows.clone(), overwrite, Some(schema))
                .await
            {
                Ok(c) => break Ok(c),
                Err(e) if retry.again(&e).await => continue,
                Err(e) => break Err(e),
            }
        }
    }

    /// A streamed append of batch `batch_id` to the sink, rows of `schema`, when the sink
    /// is a Delta table appended to that can take one
    /// ([`crate::sink::delta::DeltaSink::begin_streamed_append`]).
    pub async fn begin_streamed_append(
        &mut self,
        batch_id: u64,
        schema: &SchemaRef,
        large: bool,
    ) -> Result<Option<StreamedAppend>> {
        if !matches!(self.spec, SinkSpec::Delta { .. }) {
            return Ok(None);
        }
        // Opened once, without the retries: a sink that does not open leaves the batch
        // to the ordinary write, which retries.
        if self.sink.is_none() {
            match Sink::open(&self.spec, &self.app_id).await {
                Ok(sink) => self.sink = Some(sink),
                Err(_) => return Ok(None),
            }
        }
        match self.sink().await? {
            Sink::Delta(delta) => delta.begin_streamed_append(batch_id, schema, large).await,
            _ => Ok(None),
        }
    }

    /// Commits a streamed append's files with the batch's txn.
    pub async fn commit_streamed_append(
        &mut self,
        append: &StreamedAppend,
        batch_id: u64,
        adds: Vec<Add>,
        num_rows: usize,
    ) -> Result<SinkCommit> {
        match self.sink().await? {
            Sink::Delta(delta) => {
                delta
                    .commit_streamed_append(append, batch_id, adds, num_rows)
                    .await
            }
            other => Err(crate::error::Error::Delta {
                path: other.description(),
                source: deltalake::DeltaTableError::Generic(
                    "a streamed append committed to a sink that is not a Delta table".into(),
                ),
            }),
        }
    }

    /// The files of a streamed append that are no longer in the table's store (deleted
    /// by another tool between their write and the commit).
    pub async fn missing_files(&mut self, adds: &[Add]) -> Result<Vec<String>> {
        match self.sink().await? {
            Sink::Delta(delta) => delta.missing_files(adds).await,
            _ => Ok(Vec::new()),
        }
    }

    /// Writes batch `batch_id`'s rows to the side table at `path` (created on first use),
    /// named by its pipeline `key` (`late_rows`, `bad_records_table`), with the side
    /// table's own app id ([`crate::checkpoint::side_table_app_id`]).
    pub async fn write_side(
        &mut self,
        path: &Path,
        key: &str,
        batch_id: u64,
        rows: Vec<RecordBatch>,
        schema: Option<&SchemaRef>,
    ) -> Result<SinkCommit> {
        let index = match self.side.iter().position(|(p, _)| p == path) {
            Some(i) => i,
            None => {
                let spec = SinkSpec::Delta {
                    path: path.to_path_buf(),
                    partition_by: Vec::new(),
                    merge_schema: false,
                    idempotent: true,
                    allow_existing_table: true,
                    column_mapping_mode: None,
                    table_properties: Default::default(),
                };
                let app_id = crate::checkpoint::side_table_app_id(&self.app_id, key);
                let sink = Sink::open(&spec, &app_id).await?;
                self.side.push((path.to_path_buf(), sink));
                self.side.len() - 1
            }
        };
        self.side[index]
            .1
            .add_batch_mode(batch_id, rows, false, schema)
            .await
    }

    /// Whether the sink table already holds batch `batch_id` of this query (its Delta
    /// `txn`): a re-run batch whose first attempt committed it. False for sinks without
    /// a transaction log (memory, console) and when the table cannot be read.
    pub async fn holds_batch(&self, batch_id: u64) -> bool {
        let (SinkSpec::Delta {
            path,
            idempotent: true,
            ..
        }
        | SinkSpec::DeltaMerge { path, .. }) = &self.spec
        else {
            return false;
        };
        matches!(
            crate::delta::txn_version(path, &self.app_id).await,
            Ok(Some(v)) if v >= batch_id as i64
        )
    }

    /// The sink's description once opened (Spark's `sink.description`), else the spec's.
    pub fn description(&self) -> String {
        match &self.sink {
            Some(s) => s.description(),
            None => self.spec.describe(),
        }
    }

    /// The sink table's latest Delta version, once the sink is open.
    pub fn delta_version(&self) -> Option<i64> {
        self.sink.as_ref().and_then(Sink::delta_version)
    }

    /// Waits for the post-commit work of the last appends (deltalake's snapshot update,
    /// a checkpoint when due) when the flow stops. The commits are in the tables already:
    /// a failure here is logged, and the next run reads the tables again.
    pub async fn settle(&mut self) {
        for sink in self
            .sink
            .iter_mut()
            .chain(self.side.iter_mut().map(|(_, s)| s))
        {
            if let Err(e) = sink.settle().await {
                tracing::warn!(sink = %sink.description(), error = %e, "the post-commit of the last append failed; its commit stands");
            }
        }
    }

    pub fn is_open(&self) -> bool {
        self.sink.is_some()
    }
}
