//! The checkpoint of one flow: Spark's layout and file formats where Spark
//! has a file, weir's own files under `_weir/`.
//!
//! ```text
//! <checkpoint>/
//!   metadata                 {"id":"<query uuid>"}                                   (Spark)
//!   offsets/<batch_id>       v1 / {"batchWatermarkMs":..,"batchTimestampMs":..,"conf":{..}} / one offset per source (Spark)
//!   commits/<batch_id>       v1 / {"nextBatchWatermarkMs":..}                         (Spark)
//!   sources/0/ledger.sqlite  the file ledger (source::files::ledger)
//!   _weir/plan.json          the flow's plan: source, sink, fingerprint
//!   _weir/progress.jsonl     recent progress records (bounded)
//!   _weir/health.json        the latest health verdict (health::tracker)
//!   _weir/lock               held (flock) while a process runs the flow
//! ```
//!
//! Every file is written atomically (temp file, fsync, rename, fsync of the
//! directory) and created owner-only (0700 directories, 0600 files). Nothing
//! here deletes a checkpoint; [`retention`] removes the entries of batches older than the
//! flow's `min_batches_to_retain` after a commit (Spark's `minBatchesToRetain`).

pub mod compat;
pub mod lock;
pub mod log;
pub mod progress;
pub mod retention;

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::durable::{create_dir_private, write_atomic};
use crate::error::{Error, Result};
pub use lock::CheckpointLock;
pub use log::{CommitMetadata, MULTIPLE_WATERMARK_POLICY, OffsetSeq, OffsetSeqMetadata};

/// `metadata`: the query id, stable across restarts (Spark's `StreamMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub id: uuid::Uuid,
}

/// `_weir/plan.json`: what the flow reads and writes, for inspect and restart checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    pub flow: String,
    pub source: String,
    pub source_path: PathBuf,
    pub sink: String,
    /// Delta table path when the sink is a Delta table.
    pub sink_path: Option<PathBuf>,
    /// Sources 1.. of the flow (`[[flow.union]]`, a stream-stream join's right side).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_sources: Vec<PlanSource>,
    /// The dimension tables of the flow's stream-static joins (`[[flow.join]]`), in
    /// order; `source` is their format (`delta`, `csv`, `parquet`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<PlanSource>,
    /// The Delta tables the flow writes besides its sink (`late_rows`,
    /// `bad_records_table`), each with its own application transaction id
    /// ([`side_table_app_id`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_tables: Vec<PlanTable>,
}

/// A side table of a flow, as the plan record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanTable {
    /// The pipeline key that names it: `late_rows` or `bad_records_table`.
    pub key: String,
    pub path: PathBuf,
}

/// The application transaction id (Delta `txn.appId`) a flow's side table is written
/// with: `<query id>:<key>`. The sink's is the query id itself (as Spark's Delta sink);
/// a side table has its own so that its batch N never stands for the sink's batch N.
pub fn side_table_app_id(query_id: &str, key: &str) -> String {
    format!("{query_id}:{key}")
}

/// A source of a flow, as the plan record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSource {
    pub source: String,
    pub source_path: PathBuf,
    /// How the flow reads it: `union` or `stream_join` (its right side); absent in the
    /// records of older versions, which recorded union sources only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// A flow's checkpoint directory.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    root: PathBuf,
}

impl Checkpoint {
    /// A handle on a checkpoint directory; nothing is read or created.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Checkpoint { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn offsets_dir(&self) -> PathBuf {
        self.root.join("offsets")
    }
    pub fn commits_dir(&self) -> PathBuf {
        self.root.join("commits")
    }
    pub fn metadata_path(&self) -> PathBuf {
        self.root.join("metadata")
    }
    pub fn weir_dir(&self) -> PathBuf {
        self.root.join("_weir")
    }
    pub fn ledger_path(&self) -> PathBuf {
        self.root.join("sources").join("0").join("ledger.sqlite")
    }
    pub fn progress_path(&self) -> PathBuf {
        self.weir_dir().join("progress.jsonl")
    }
    /// `_weir/alerts.jsonl`: every alert notification of the flow (fired, resolved).
    pub fn alerts_path(&self) -> PathBuf {
        self.weir_dir().join("alerts.jsonl")
    }
    /// `_weir/health.json`: the latest health verdict.
    pub fn health_path(&self) -> PathBuf {
        self.weir_dir().join("health.json")
    }
    pub fn plan_path(&self) -> PathBuf {
        self.weir_dir().join("plan.json")
    }
    pub fn schemas_dir(&self) -> PathBuf {
        self.root.join("_schemas")
    }

    /// Whether the directory holds a checkpoint (its `metadata` file exists).
    pub fn exists(&self) -> bool {
        self.metadata_path().is_file()
    }

    /// Creates the layout if missing and returns the query id (new or existing).
    pub fn open_or_create(&self) -> Result<Metadata> {
        for dir in [
            self.root.clone(),
            self.offsets_dir(),
            self.commits_dir(),
            self.weir_dir(),
            self.root.join("sources").join("0"),
        ] {
            create_dir_private(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        if self.metadata_path().exists() {
            return self.read_metadata();
        }
        let metadata = Metadata {
            id: uuid::Uuid::new_v4(),
        };
        let text = serde_json::to_string(&metadata)
            .map_err(|e| Error::checkpoint(self.metadata_path(), e.to_string()))?;
        write_atomic(&self.metadata_path(), text.as_bytes())
            .map_err(|e| Error::unwritable(self.metadata_path(), e))?;
        Ok(metadata)
    }

    pub fn read_metadata(&self) -> Result<Metadata> {
        let path = self.metadata_path();
        let text =
            fs::read_to_string(&path).map_err(|e| Error::checkpoint(&path, e.to_string()))?;
        serde_json::from_str(text.trim()).map_err(|e| {
            Error::checkpoint(
                &path,
                format!("not a valid metadata file ({e}); expected {{\"id\":\"<uuid>\"}}"),
            )
        })
    }

    /// Batch ids present in `offsets/` or `commits/`, ascending. Temp files are ignored.
    pub fn batch_ids(dir: &Path) -> Result<Vec<u64>> {
        crate::numbered::ids(dir).map_err(|e| Error::checkpoint(dir, e.to_string()))
    }

    pub fn offsets_path(&self, batch_id: u64) -> PathBuf {
        self.offsets_dir().join(batch_id.to_string())
    }
    pub fn commit_path(&self, batch_id: u64) -> PathBuf {
        self.commits_dir().join(batch_id.to_string())
    }

    /// The last planned batch and its offsets.
    pub fn latest_offsets(&self) -> Result<Option<(u64, OffsetSeq)>> {
        match Self::batch_ids(&self.offsets_dir())?.last() {
            None => Ok(None),
            Some(&id) => {
                let path = self.offsets_path(id);
                let text = fs::read_to_string(&path)
                    .map_err(|e| Error::checkpoint(&path, e.to_string()))?;
                let seq = OffsetSeq::parse(&text).map_err(|m| self.torn(&path, m))?;
                Ok(Some((id, seq)))
            }
        }
    }

    /// The last committed batch.
    pub fn latest_commit(&self) -> Result<Option<(u64, CommitMetadata)>> {
        match Self::batch_ids(&self.commits_dir())?.last() {
            None => Ok(None),
            Some(&id) => {
                let path = self.commit_path(id);
                let text = fs::read_to_string(&path)
                    .map_err(|e| Error::checkpoint(&path, e.to_string()))?;
                let commit = CommitMetadata::parse(&text).map_err(|m| self.torn(&path, m))?;
                Ok(Some((id, commit)))
            }
        }
    }

    /// The last file of a log cannot be parsed: a power cut on a file system without
    /// atomic rename can leave it empty or cut short; say how to repair it.
    fn torn(&self, path: &Path, message: String) -> Error {
        Error::checkpoint(
            path,
            format!(
                "{message}; if a power cut tore this last file, `weir checkpoint repair {}` moves it aside so the batch is re-run (docs/reliability.md)",
                self.root.display()
            ),
        )
    }

    pub fn read_offsets(&self, batch_id: u64) -> Result<OffsetSeq> {
        let path = self.offsets_path(batch_id);
        let text =
            fs::read_to_string(&path).map_err(|e| Error::checkpoint(&path, e.to_string()))?;
        OffsetSeq::parse(&text).map_err(|m| Error::checkpoint(&path, m))
    }

    pub fn read_commit(&self, batch_id: u64) -> Result<CommitMetadata> {
        let path = self.commit_path(batch_id);
        let text =
            fs::read_to_string(&path).map_err(|e| Error::checkpoint(&path, e.to_string()))?;
        CommitMetadata::parse(&text).map_err(|m| Error::checkpoint(&path, m))
    }

    /// Writes `offsets/<batch_id>` (the write-ahead log entry). Refuses to overwrite,
    /// atomically (`renameat2(RENAME_NOREPLACE)`): two writers cannot both succeed.
    pub fn write_offsets(&self, batch_id: u64, offsets: &OffsetSeq) -> Result<()> {
        let path = self.offsets_path(batch_id);
        crate::durable::write_new(&path, offsets.render().as_bytes()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::checkpoint(
                    &path,
                    "offsets for this batch already exist; another process may be writing this checkpoint",
                )
            } else {
                Error::unwritable(&path, e)
            }
        })
    }

    /// Writes `commits/<batch_id>`: batch finished.
    pub fn write_commit(&self, batch_id: u64, commit: &CommitMetadata) -> Result<()> {
        write_atomic(&self.commit_path(batch_id), commit.render().as_bytes())
            .map_err(|e| Error::unwritable(self.commit_path(batch_id), e))
    }

    pub fn write_plan(&self, plan: &PlanRecord) -> Result<()> {
        let text = serde_json::to_string_pretty(plan)
            .map_err(|e| Error::checkpoint(self.plan_path(), e.to_string()))?;
        write_atomic(&self.plan_path(), text.as_bytes())
            .map_err(|e| Error::unwritable(self.plan_path(), e))
    }

    /// Reads `_weir/health.json`, if any (an unreadable file counts as none).
    pub fn read_health(&self) -> Option<crate::records::HealthRecord> {
        let text = fs::read_to_string(self.health_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    pub fn read_plan(&self) -> Result<Option<PlanRecord>> {
        let path = self.plan_path();
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| Error::checkpoint(&path, format!("not a valid plan file: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::checkpoint(&path, e.to_string())),
        }
    }
}
