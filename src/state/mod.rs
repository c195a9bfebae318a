//! The versioned state store: one directory per stateful operator, one state
//! version per batch id. Version N is the operator's state after batch N;
//! batch N loads version N-1 and commits version N (DESIGN.md §5 step 6:
//! after the sink commit, before `commits/N`).
//!
//! ```text
//! <checkpoint>/state/<operator_id>/
//!   schema            JSON: format version, operator name, the operator's spec
//!                     fingerprint, key columns, state columns (for restart checks)
//!   <N>.delta         Arrow IPC file: rows upserted and keys removed by batch N
//!                     (state columns + a `__weir_removed` boolean; removed rows carry
//!                     only their key)
//!   <N>.snapshot      Arrow IPC file: the whole state at version N
//! ```
//!
//! - **Snapshots** are written every [`SNAPSHOT_INTERVAL`] versions (N % 10 == 0) and
//!   for the first version an operator commits; every other version writes a delta, and
//!   so does a snapshot version unless its changes are at least the rows it holds (then
//!   the snapshot alone is written: the delta would be as large and is never read).
//! - **Loading version N** reads the latest snapshot ≤ N and applies the deltas after it
//!   up to N. Files of versions > N (written by an attempt that crashed before
//!   `commits/N`) are ignored, and the replay overwrites them.
//! - **Retention**: the flow's `min_batches_to_retain` (Spark's
//!   `spark.sql.streaming.minBatchesToRetain`, default [`RETAIN_VERSIONS`] = 100), the same
//!   number of batches the checkpoint's `offsets/` and `commits/` keep. After `commits/N`
//!   the engine calls [`purge_tree`] (`checkpoint::retention`): files older than the latest
//!   snapshot ≤ N - (retain - 1) are deleted, so the last `retain` versions stay loadable
//!   (at most retain + [`SNAPSHOT_INTERVAL`] versions are on disk). Nothing newer than the
//!   version committed is ever deleted. A store opened with [`StoreOptions::retaining`]
//!   purges itself after each commit (tests).
//! - Every file is written atomically (temp file, fsync, rename; [`write_atomic`]).
//! - **Restart compatibility**: `schema` records the operator's spec fingerprint
//!   (operator, keys, window, aggregates, output mode, ...). Opening a committed version
//!   with a different fingerprint, or with state columns of other types, fails with
//!   [`Error::StateIncompatible`] naming what changed and the options.
//!
//! [`StateTable`] is the in-memory side: the rows of the open keys and the changes
//! since the last commit.

pub mod spill;
pub mod table;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, new_null_array};
use arrow::compute::{filter_record_batch, not};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use serde::{Deserialize, Serialize};

use crate::durable::{create_dir_private, write_atomic, write_atomic_with};
use crate::error::{Error, Result};
pub use spill::SpillStore;
pub use table::{Changes, KeyRows, Slot, StateTable};

/// A snapshot is written when `version % SNAPSHOT_INTERVAL == 0`.
pub const SNAPSHOT_INTERVAL: u64 = 10;
/// Number of most recent versions that stay loadable after a commit by default: Spark's
/// `minBatchesToRetain` default, the same as the checkpoint logs keep.
pub const RETAIN_VERSIONS: u64 = 100;
/// Name of the flag column in delta files.
pub const REMOVED_COLUMN: &str = "__weir_removed";
const FORMAT_VERSION: u32 = 1;

/// Snapshot interval and retention of a [`StateStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    pub snapshot_interval: u64,
    /// Versions kept loadable by the store's own purge after each commit; `u64::MAX`
    /// (the default): the store deletes nothing itself, the engine purges after `commits/N`
    /// with the flow's `min_batches_to_retain` ([`purge_tree`]).
    pub retain_versions: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            snapshot_interval: SNAPSHOT_INTERVAL,
            retain_versions: u64::MAX,
        }
    }
}

impl StoreOptions {
    /// A store that purges itself after each commit, keeping `versions` loadable.
    pub fn retaining(versions: u64) -> Self {
        StoreOptions {
            retain_versions: versions,
            ..StoreOptions::default()
        }
    }
}

/// What an operator's state is, for restart checks: an ordered map from aspect
/// (`operator`, `group_by`, `aggregates`, `window`, `output_mode`, ...) to its
/// canonical text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint(pub BTreeMap<String, String>);

impl Fingerprint {
    pub fn with(mut self, aspect: &str, value: impl Into<String>) -> Self {
        self.0.insert(aspect.to_string(), value.into());
        self
    }

    /// Human description of what differs from `saved` (the checkpoint's) to `self` (the plan's).
    pub fn diff(&self, saved: &Fingerprint) -> Vec<String> {
        let mut aspects: Vec<&String> = saved.0.keys().chain(self.0.keys()).collect();
        aspects.sort();
        aspects.dedup();
        aspects
            .into_iter()
            .filter_map(|a| match (saved.0.get(a), self.0.get(a)) {
                (Some(x), Some(y)) if x == y => None,
                // The state holds the accumulators, not the output names: renaming an
                // aggregate's output column (`sum(v) AS total` -> `AS amount`) keeps it.
                (Some(x), Some(y))
                    if a == "aggregates"
                        && without_aliases(x).is_some_and(|c| Some(c) == without_aliases(y)) =>
                {
                    None
                }
                (Some(x), Some(y)) => Some(format!("{a} changed from `{x}` to `{y}`")),
                (Some(x), None) => Some(format!("{a} `{x}` was removed")),
                (None, Some(y)) => Some(format!("{a} `{y}` was added")),
                (None, None) => None,
            })
            .collect()
    }
}

/// A list of SQL select items (`count(*) AS n, sum(v) AS total`) without their
/// aliases (`count(*), sum(v)`); `None` when it does not parse.
fn without_aliases(items: &str) -> Option<String> {
    use datafusion::sql::sqlparser::ast::SelectItem;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;
    let mut parser = Parser::new(&GenericDialect {}).try_with_sql(items).ok()?;
    let parsed = parser
        .parse_comma_separated(|p| p.parse_select_item())
        .ok()?;
    let exprs: Vec<String> = parsed
        .into_iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => {
                expr.to_string()
            }
            other => other.to_string(),
        })
        .collect();
    Some(exprs.join(", "))
}

/// One state column as recorded in the `schema` file (informational; the exact
/// types are in the IPC files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub data_type: String,
    pub nullable: bool,
}

/// Content of `state/<operator_id>/schema`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateMetadata {
    pub format_version: u32,
    pub operator_name: String,
    pub fingerprint: Fingerprint,
    pub key_columns: Vec<String>,
    pub fields: Vec<FieldInfo>,
}

/// Files of one state version found on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VersionFiles {
    pub delta_bytes: Option<u64>,
    pub snapshot_bytes: Option<u64>,
}

/// Bytes and files written by one commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitInfo {
    pub version: u64,
    pub delta_bytes: u64,
    pub snapshot_written: bool,
    pub files_deleted: usize,
}

/// The on-disk side of one operator's state (see the module docs).
pub struct StateStore {
    dir: PathBuf,
    schema: SchemaRef,
    num_keys: usize,
    options: StoreOptions,
    version: Option<u64>,
}

fn ckpt(path: &Path, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

impl StateStore {
    /// Opens the state directory of an operator and loads `load_version` (the last
    /// committed batch id; `None` for a query without committed batches).
    ///
    /// Writes `schema` when starting fresh; otherwise checks that the saved fingerprint
    /// and state columns equal the plan's and fails with [`Error::StateIncompatible`]
    /// if not.
    pub fn open(
        dir: &Path,
        operator_name: &str,
        fingerprint: &Fingerprint,
        schema: SchemaRef,
        num_keys: usize,
        load_version: Option<u64>,
        options: StoreOptions,
    ) -> Result<(StateStore, StateTable)> {
        let store = Self::open_unloaded(
            dir,
            operator_name,
            fingerprint,
            schema.clone(),
            num_keys,
            load_version,
            options,
        )?;
        let table = match load_version {
            Some(version) => store.load(version)?,
            None => StateTable::new(schema, num_keys)?,
        };
        Ok((store, table))
    }

    /// [`Self::open`] without loading the state: the checks and the `schema` file only
    /// (the caller loads `load_version`, e.g. with [`Self::load_spilling`]).
    pub fn open_unloaded(
        dir: &Path,
        operator_name: &str,
        fingerprint: &Fingerprint,
        schema: SchemaRef,
        num_keys: usize,
        load_version: Option<u64>,
        options: StoreOptions,
    ) -> Result<StateStore> {
        let store = StateStore {
            dir: dir.to_path_buf(),
            schema: schema.clone(),
            num_keys,
            options: StoreOptions {
                snapshot_interval: options.snapshot_interval.max(1),
                retain_versions: options.retain_versions.max(1),
            },
            version: load_version,
        };
        let metadata = StateMetadata {
            format_version: FORMAT_VERSION,
            operator_name: operator_name.to_string(),
            fingerprint: fingerprint.clone(),
            key_columns: schema.fields()[..num_keys.min(schema.fields().len())]
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            fields: schema
                .fields()
                .iter()
                .map(|f| FieldInfo {
                    name: f.name().clone(),
                    data_type: f.data_type().to_string(),
                    nullable: f.is_nullable(),
                })
                .collect(),
        };
        let Some(version) = load_version else {
            create_dir_private(dir).map_err(|e| Error::io(dir, e))?;
            store.write_metadata(&metadata)?;
            return Ok(store);
        };
        let saved = store.read_metadata()?.ok_or_else(|| Error::StateIncompatible {
            path: dir.to_path_buf(),
            message: format!(
                "the checkpoint has committed batches up to {version} but no state for this {operator_name} \
                 operator: it was added to the flow after the query started. Options: remove the operator \
                 again to resume from this checkpoint, or start the flow with a new checkpoint (it \
                 re-reads the source from the beginning)"
            ),
        })?;
        let mut changes = fingerprint.diff(&saved.fingerprint);
        if saved.operator_name != operator_name {
            changes.insert(
                0,
                format!(
                    "operator changed from `{}` to `{operator_name}`",
                    saved.operator_name
                ),
            );
        }
        if !changes.is_empty() {
            return Err(incompatible(dir, &changes));
        }
        Ok(store)
    }

    /// The directory of this operator's state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version loaded or last committed.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    fn metadata_path(&self) -> PathBuf {
        self.dir.join("schema")
    }

    fn delta_path(&self, version: u64) -> PathBuf {
        self.dir.join(format!("{version}.delta"))
    }

    fn snapshot_path(&self, version: u64) -> PathBuf {
        self.dir.join(format!("{version}.snapshot"))
    }

    fn write_metadata(&self, metadata: &StateMetadata) -> Result<()> {
        let text = serde_json::to_string_pretty(metadata)
            .map_err(|e| ckpt(&self.metadata_path(), e.to_string()))?;
        write_atomic(&self.metadata_path(), text.as_bytes())
            .map_err(|e| Error::unwritable(self.metadata_path(), e))
    }

    fn read_metadata(&self) -> Result<Option<StateMetadata>> {
        read_metadata(&self.dir)
    }

    /// State files on disk by version (temp files and others ignored).
    pub fn list_versions(dir: &Path) -> Result<BTreeMap<u64, VersionFiles>> {
        let mut out: BTreeMap<u64, VersionFiles> = BTreeMap::new();
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(ckpt(dir, format!("cannot list state files: {e}"))),
        };
        for entry in entries {
            let entry = entry.map_err(|e| ckpt(dir, format!("cannot list state files: {e}")))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((stem, ext)) = name.split_once('.') else {
                continue;
            };
            let Ok(version) = stem.parse::<u64>() else {
                continue;
            };
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            let files = out.entry(version).or_default();
            match ext {
                "delta" => files.delta_bytes = Some(size),
                "snapshot" => files.snapshot_bytes = Some(size),
                _ => {}
            }
        }
        out.retain(|_, f| f.delta_bytes.is_some() || f.snapshot_bytes.is_some());
        Ok(out)
    }

    /// The snapshot version and delta versions that make up `version`.
    fn chain(&self, files: &BTreeMap<u64, VersionFiles>, version: u64) -> Result<(u64, Vec<u64>)> {
        let base = files
            .range(..=version)
            .rev()
            .find(|(_, f)| f.snapshot_bytes.is_some())
            .map(|(v, _)| *v)
            .ok_or_else(|| {
                ckpt(
                    &self.dir,
                    format!(
                        "state version {version} cannot be loaded: no snapshot at or before it \
                         (state files were deleted or the checkpoint is incomplete)"
                    ),
                )
            })?;
        let mut deltas = Vec::new();
        for v in base + 1..=version {
            if files.get(&v).and_then(|f| f.delta_bytes).is_none() {
                return Err(ckpt(
                    &self.delta_path(v),
                    format!(
                        "state version {version} cannot be loaded: the delta of version {v} is missing"
                    ),
                ));
            }
            deltas.push(v);
        }
        Ok((base, deltas))
    }

    /// Reads state version `version` (snapshot + deltas).
    pub fn load(&self, version: u64) -> Result<StateTable> {
        let files = Self::list_versions(&self.dir)?;
        let (base, deltas) = self.chain(&files, version)?;
        let snapshot = self.read_ipc(&self.snapshot_path(base), &self.schema)?;
        let mut table = StateTable::from_batch(self.schema.clone(), self.num_keys, snapshot)?;
        let delta_schema = delta_schema(&self.schema);
        for v in deltas {
            let path = self.delta_path(v);
            let delta = self.read_ipc(&path, &delta_schema)?;
            let (upserts, removals, n) = split_delta(&delta, &self.schema, self.num_keys)
                .map_err(|e| ckpt(&path, format!("not a valid state delta: {e}")))?;
            table.apply(&upserts, &removals, n)?;
        }
        table.clear_changes();
        Ok(table)
    }

    /// Reads state version `version` into a table of at most about `memory_limit` bytes
    /// and `spill` (emptied first), which gets the rest: the snapshot is read batch by
    /// batch (never whole in memory once written by a spilling operator), the table
    /// moved to `spill` whenever it outgrows the limit, then the deltas applied to both.
    /// For state of the [`SpillStore`] shape (key columns and one `Int64` expiry).
    pub fn load_spilling(
        &self,
        version: u64,
        memory_limit: usize,
        spill: &mut SpillStore,
    ) -> Result<StateTable> {
        check_spillable(&self.schema, self.num_keys, &self.dir)?;
        spill.clear()?;
        let files = Self::list_versions(&self.dir)?;
        let (base, deltas) = self.chain(&files, version)?;
        let path = self.snapshot_path(base);
        let mut table = StateTable::new(self.schema.clone(), self.num_keys)?;
        let file = fs::File::open(&path).map_err(|e| ckpt(&path, format!("cannot read: {e}")))?;
        let reader = FileReader::try_new(std::io::BufReader::new(file), None)
            .map_err(|e| ckpt(&path, format!("not an Arrow IPC state file: {e}")))?;
        check_types(&path, &self.schema, &reader.schema())?;
        for batch in reader {
            let batch = batch.map_err(|e| ckpt(&path, format!("cannot read state rows: {e}")))?;
            let batch = RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())
                .map_err(|e| {
                    ckpt(
                        &path,
                        format!("state rows do not fit the state schema: {e}"),
                    )
                })?;
            table.upsert(&batch)?;
            if table.memory_size() > memory_limit {
                table = spill_table(table, spill)?;
            }
        }
        let delta_schema = delta_schema(&self.schema);
        for v in deltas {
            let path = self.delta_path(v);
            let delta = self.read_ipc(&path, &delta_schema)?;
            let (upserts, removals, n) = split_delta(&delta, &self.schema, self.num_keys)
                .map_err(|e| ckpt(&path, format!("not a valid state delta: {e}")))?;
            drop(delta);
            // Removed keys not in the table are spilled ones; an upserted key that was
            // spilled comes back to the table.
            let mut spilled: Vec<Vec<u8>> = Vec::new();
            if n > 0 {
                let keys = table.key_rows(&removals)?;
                for i in 0..n {
                    if table.lookup(keys.get(i)).is_none() {
                        spilled.push(keys.get(i).to_vec());
                    }
                }
            }
            if upserts.num_rows() > 0 && !spill.is_empty() {
                let keys = table.key_rows(&upserts.columns()[..self.num_keys])?;
                for i in 0..upserts.num_rows() {
                    if spill.contains(keys.get(i))? {
                        spilled.push(keys.get(i).to_vec());
                    }
                }
            }
            spill.remove(spilled.iter().map(Vec::as_slice))?;
            table.apply(&upserts, &removals, n)?;
            if table.memory_size() > memory_limit {
                table = spill_table(table, spill)?;
            }
        }
        table.clear_changes();
        Ok(table)
    }

    /// Persists version `version` from the table's changes (and a snapshot when due),
    /// then deletes versions beyond retention.
    pub fn commit(&mut self, version: u64, table: &mut StateTable) -> Result<CommitInfo> {
        self.commit_spilled(version, table, None)
    }

    /// [`Self::commit`] for state split between `table` and `spill`: removals of spilled
    /// keys are in the table's changes ([`StateTable::record_removed`]); a snapshot holds
    /// the table's rows, then the spilled ones decoded a chunk at a time.
    pub fn commit_spilled(
        &mut self,
        version: u64,
        table: &mut StateTable,
        spill: Option<&SpillStore>,
    ) -> Result<CommitInfo> {
        if let Some(prev) = self.version
            && version != prev + 1
        {
            return Err(ckpt(
                &self.dir,
                format!(
                    "state version {version} committed after version {prev}; versions must be consecutive"
                ),
            ));
        }
        create_dir_private(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        // The changes are cleared only once everything is written, so a failed commit
        // can be retried.
        let num_changes = table.num_changes();
        let snapshot_due =
            self.version.is_none() || version.is_multiple_of(self.options.snapshot_interval);
        // A snapshot version whose changes are at least the rows it holds (the first
        // batch of a stream) is written as the snapshot alone: its delta would be as
        // large, and loading this version or a later one starts from the latest
        // snapshot, never from this version's delta.
        let total_rows = table.len() as u64 + spill.map_or(0, SpillStore::len);
        let snapshot_only = snapshot_due && num_changes > 0 && num_changes as u64 >= total_rows;
        let delta_path = self.delta_path(version);
        let mut delta_bytes = 0;
        if snapshot_only {
            remove_stale(&delta_path)?;
        } else {
            let changes = table.changes()?;
            let delta = delta_batches(&changes, &self.schema, self.num_keys)?;
            drop(changes);
            delta_bytes = write_ipc(&delta_path, &delta_schema(&self.schema), &delta)?;
        }
        let snapshot_path = self.snapshot_path(version);
        if snapshot_due {
            match spill {
                Some(spill) if !spill.is_empty() => {
                    write_snapshot_spilled(&snapshot_path, table, spill)?;
                }
                _ => {
                    write_ipc(
                        &snapshot_path,
                        table.data().schema_ref(),
                        std::slice::from_ref(table.data()),
                    )?;
                }
            }
        } else {
            remove_stale(&snapshot_path)?;
        }
        table.clear_changes();
        self.version = Some(version);
        let files_deleted = self.cleanup(version);
        Ok(CommitInfo {
            version,
            delta_bytes,
            snapshot_written: snapshot_due,
            files_deleted,
        })
    }

    /// Deletes files no longer needed to load the last `retain_versions` versions.
    fn cleanup(&self, version: u64) -> usize {
        if self.options.retain_versions == u64::MAX {
            return 0;
        }
        purge_versions(&self.dir, version, self.options.retain_versions)
    }

    /// Bytes on disk of the files that make up the current version (snapshot + deltas).
    pub fn current_version_size_bytes(&self) -> u64 {
        let Some(version) = self.version else {
            return 0;
        };
        let Ok(files) = Self::list_versions(&self.dir) else {
            return 0;
        };
        let Ok((base, deltas)) = self.chain(&files, version) else {
            return 0;
        };
        let snapshot = files.get(&base).and_then(|f| f.snapshot_bytes).unwrap_or(0);
        snapshot
            + deltas
                .iter()
                .filter_map(|v| files.get(v).and_then(|f| f.delta_bytes))
                .sum::<u64>()
    }

    fn read_ipc(&self, path: &Path, expected: &SchemaRef) -> Result<RecordBatch> {
        let file = fs::File::open(path).map_err(|e| ckpt(path, format!("cannot read: {e}")))?;
        let reader = FileReader::try_new(std::io::BufReader::new(file), None)
            .map_err(|e| ckpt(path, format!("not an Arrow IPC state file: {e}")))?;
        let found = reader.schema();
        check_types(path, expected, &found)?;
        let mut batches = Vec::new();
        for batch in reader {
            let batch = batch.map_err(|e| ckpt(path, format!("cannot read state rows: {e}")))?;
            batches.push(
                RecordBatch::try_new(expected.clone(), batch.columns().to_vec()).map_err(|e| {
                    ckpt(path, format!("state rows do not fit the state schema: {e}"))
                })?,
            );
        }
        if batches.len() == 1 {
            return Ok(batches.remove(0));
        }
        arrow::compute::concat_batches(expected, &batches)
            .map_err(|e| ckpt(path, format!("cannot read state rows: {e}")))
    }
}

/// Removes a file of this version left by an attempt of the batch that crashed before
/// `commits/N` (the version is written again, maybe with other files).
fn remove_stale(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ckpt(path, format!("cannot remove: {e}"))),
    }
}

/// Reads `state/<operator_id>/schema`, if present.
pub fn read_metadata(dir: &Path) -> Result<Option<StateMetadata>> {
    let path = dir.join("schema");
    match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ckpt(&path, format!("not a valid state schema file: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ckpt(&path, format!("cannot read: {e}"))),
    }
}

/// Deletes the files of one state directory no longer needed to load the last `retain`
/// versions up to `version`: everything older than the latest snapshot at or before
/// `version - (retain - 1)`. Files of versions after that snapshot (also any newer than
/// `version`, left by an attempt that crashed) are kept. Returns the number of files deleted.
pub fn purge_versions(dir: &Path, version: u64, retain: u64) -> usize {
    let Ok(files) = StateStore::list_versions(dir) else {
        return 0;
    };
    let oldest_kept = version.saturating_sub(retain.max(1) - 1);
    let Some(base) = files
        .range(..=oldest_kept)
        .rev()
        .find(|(_, f)| f.snapshot_bytes.is_some())
        .map(|(v, _)| *v)
    else {
        return 0;
    };
    let mut deleted = 0;
    for (&v, f) in files.range(..base) {
        for (present, path) in [
            (f.delta_bytes.is_some(), dir.join(format!("{v}.delta"))),
            (
                f.snapshot_bytes.is_some(),
                dir.join(format!("{v}.snapshot")),
            ),
        ] {
            if !present {
                continue;
            }
            match fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete an old state file")
                }
            }
        }
    }
    deleted
}

/// [`purge_versions`] for every state directory under `<checkpoint>/state`: each
/// operator's (`state/<id>/`) and a stream-stream join's sides (`state/<id>/<side>/`),
/// the directories holding a `schema` file. Returns the number of files deleted.
pub fn purge_tree(state_root: &Path, version: u64, retain: u64) -> usize {
    let mut deleted = 0;
    let mut dirs = vec![(state_root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        if dir.join("schema").is_file() {
            deleted += purge_versions(&dir, version, retain);
        }
        if depth >= 2 {
            continue;
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push((entry.path(), depth + 1));
            }
        }
    }
    deleted
}

/// Operator ids that have a state directory under `<checkpoint>/state`, ascending
/// (for the engine's "operator removed" check).
pub fn operator_ids(state_root: &Path) -> Result<Vec<u64>> {
    crate::numbered::ids(state_root).map_err(|e| ckpt(state_root, format!("cannot list: {e}")))
}

fn incompatible(dir: &Path, changes: &[String]) -> Error {
    Error::StateIncompatible {
        path: dir.to_path_buf(),
        message: format!(
            "the flow's stateful operator changed since the state was saved: {}. The saved state cannot \
             be reused with the new plan. Options: revert the change to resume from this checkpoint, or \
             start the flow with a new checkpoint (a new `checkpoint` path; the query then re-reads its \
             source from the beginning)",
            changes.join("; ")
        ),
    }
}

fn check_types(path: &Path, expected: &SchemaRef, found: &SchemaRef) -> Result<()> {
    let same_len = expected.fields().len() == found.fields().len();
    let mismatch: Vec<String> = expected
        .fields()
        .iter()
        .zip(found.fields().iter())
        .filter(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
        .map(|(a, b)| {
            format!(
                "state column `{}` is {} in the checkpoint but `{}` {} in this plan",
                b.name(),
                b.data_type(),
                a.name(),
                a.data_type()
            )
        })
        .collect();
    if same_len && mismatch.is_empty() {
        return Ok(());
    }
    let mut changes = mismatch;
    if !same_len {
        changes.push(format!(
            "the state has {} columns in the checkpoint and {} in this plan",
            found.fields().len(),
            expected.fields().len()
        ));
    }
    changes.push("(an input column's type may have changed)".to_string());
    Err(incompatible(path.parent().unwrap_or(path), &changes))
}

/// Schema of delta files: the state columns (values nullable) plus [`REMOVED_COLUMN`].
pub fn delta_schema(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    fields.push(Field::new(REMOVED_COLUMN, DataType::Boolean, false));
    Arc::new(Schema::new(fields))
}

/// The rows of a delta file: the upserted rows, then the removed keys (values null),
/// each with its [`REMOVED_COLUMN`] flag; two batches, so the rows are not copied.
fn delta_batches(
    changes: &Changes,
    schema: &SchemaRef,
    num_keys: usize,
) -> Result<Vec<RecordBatch>> {
    let arrow = |source| Error::Arrow {
        context: "writing a state delta".into(),
        source,
    };
    let delta = delta_schema(schema);
    let part = |mut columns: Vec<ArrayRef>, rows: usize, removed: bool| {
        columns.push(Arc::new(BooleanArray::from(vec![removed; rows])));
        RecordBatch::try_new_with_options(
            delta.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(arrow)
    };
    let mut out = Vec::with_capacity(2);
    let n_up = changes.upserts.num_rows();
    if n_up > 0 {
        out.push(part(changes.upserts.columns().to_vec(), n_up, false)?);
    }
    let n_rm = changes.num_removals;
    if n_rm > 0 {
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, field)| match changes.removals.get(i) {
                Some(keys) if i < num_keys => keys.clone(),
                _ => new_null_array(field.data_type(), n_rm),
            })
            .collect();
        out.push(part(columns, n_rm, true)?);
    }
    Ok(out)
}

/// Splits a delta into upsert rows (state schema) and removed key columns.
fn split_delta(
    delta: &RecordBatch,
    schema: &SchemaRef,
    num_keys: usize,
) -> std::result::Result<(RecordBatch, Vec<ArrayRef>, usize), arrow::error::ArrowError> {
    let n = schema.fields().len();
    let flags = delta
        .column(n)
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| {
            arrow::error::ArrowError::SchemaError(format!("{REMOVED_COLUMN} is not boolean"))
        })?
        .clone();
    let upserts = filter_record_batch(delta, &not(&flags)?)?;
    let removals = filter_record_batch(delta, &flags)?;
    let upserts = RecordBatch::try_new_with_options(
        schema.clone(),
        upserts.columns()[..n].to_vec(),
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(upserts.num_rows())),
    )?;
    let keys = removals.columns()[..num_keys].to_vec();
    Ok((upserts, keys, removals.num_rows()))
}

/// Writes `batches` to `path` as one Arrow IPC file, atomically, as they are encoded;
/// returns the file's size.
fn write_ipc(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<u64> {
    let written = write_atomic_with(path, |file| {
        let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), schema)?;
        for batch in batches {
            writer.write(batch)?;
        }
        writer.finish()?;
        writer.into_inner()?.flush()?;
        Ok::<(), arrow::error::ArrowError>(())
    });
    written.map_err(|e| match e {
        arrow::error::ArrowError::IoError(_, source) => Error::unwritable(path, source),
        other => ckpt(path, format!("cannot encode state rows: {other}")),
    })?;
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| ckpt(path, format!("cannot read: {e}")))
}

/// Rows per batch of a snapshot's spilled part.
const SPILL_CHUNK_ROWS: usize = 65_536;

/// Whether a state of `schema` can spill: key columns then one `Int64` column (the
/// time a key expires), as deduplication's.
pub fn check_spillable(schema: &SchemaRef, num_keys: usize, dir: &Path) -> Result<()> {
    let fields = schema.fields();
    if num_keys == 0
        || fields.len() != num_keys + 1
        || fields[num_keys].data_type() != &DataType::Int64
    {
        return Err(ckpt(
            dir,
            "this operator's state cannot spill to disk (only key columns and an expiry can)",
        ));
    }
    Ok(())
}

/// Rows of `spill` as state rows of `table`'s schema (keys decoded, the expiry last).
fn spilled_batch(table: &StateTable, rows: &[(Vec<u8>, i64)]) -> Result<RecordBatch> {
    let mut columns = table.decode_keys(rows.iter().map(|(k, _)| k.as_slice()))?;
    columns.push(Arc::new(arrow::array::Int64Array::from_iter_values(
        rows.iter().map(|(_, e)| *e),
    )));
    RecordBatch::try_new(table.schema().clone(), columns).map_err(|source| Error::Arrow {
        context: "reading spilled state".into(),
        source,
    })
}

/// Moves every row of `table` (no pending changes) to `spill`, in key order, and
/// returns an empty table.
pub fn spill_table(table: StateTable, spill: &mut SpillStore) -> Result<StateTable> {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let data = table.data();
    let expires = data
        .column(data.num_columns() - 1)
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| ckpt(Path::new("state"), "the state's last column is not Int64"))?;
    let mut order: Vec<usize> = (0..table.len()).collect();
    order.sort_unstable_by(|a, b| table.key(*a).cmp(table.key(*b)));
    spill.insert(order.iter().map(|&p| {
        let e = if expires.is_null(p) {
            i64::MIN
        } else {
            expires.value(p)
        };
        (table.key(p), e)
    }))?;
    StateTable::new(table.schema().clone(), table.num_keys())
}

/// Writes a snapshot of `table` + `spill` as it is read from `spill` (the spilled rows
/// are never all in memory).
fn write_snapshot_spilled(path: &Path, table: &StateTable, spill: &SpillStore) -> Result<u64> {
    let mut failure: Option<Error> = None;
    let written = write_atomic_with(path, |file| {
        let mut writer = FileWriter::try_new(std::io::BufWriter::new(file), table.schema())?;
        if !table.is_empty() {
            writer.write(table.data())?;
        }
        let chunks = spill.for_each_chunk(SPILL_CHUNK_ROWS, |rows| {
            let batch = spilled_batch(table, rows)?;
            writer.write(&batch).map_err(|source| Error::Arrow {
                context: "writing a state snapshot".into(),
                source,
            })
        });
        if let Err(e) = chunks {
            let message = e.to_string();
            failure = Some(e);
            return Err(arrow::error::ArrowError::ExternalError(message.into()));
        }
        writer.finish()?;
        writer.into_inner()?.flush()?;
        Ok::<(), arrow::error::ArrowError>(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    written.map_err(|e| match e {
        arrow::error::ArrowError::IoError(_, source) => Error::unwritable(path, source),
        other => ckpt(path, format!("cannot encode state rows: {other}")),
    })?;
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| ckpt(path, format!("cannot read: {e}")))
}

/// Length of a batch's columns in memory; used by operators for `memoryUsedBytes`.
pub fn batch_memory(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| c.get_array_memory_size())
        .sum()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, false),
        ]))
    }

    fn rows(keys: &[&str], values: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    fn contents(t: &StateTable) -> Vec<(String, i64)> {
        let k = t
            .data()
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        let v = t
            .data()
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        (0..t.len())
            .map(|i| (k.value(i).to_string(), v.value(i)))
            .collect()
    }

    fn fp(mode: &str) -> Fingerprint {
        Fingerprint::default()
            .with("group_by", "k")
            .with("output_mode", mode)
    }

    fn open(
        dir: &Path,
        version: Option<u64>,
        options: StoreOptions,
    ) -> Result<(StateStore, StateTable)> {
        StateStore::open(
            dir,
            "stateStoreSave",
            &fp("append"),
            schema(),
            1,
            version,
            options,
        )
    }

    /// Runs `n` versions: version v upserts key `k{v%5}` = v and removes `k{(v+2)%5}`.
    fn mutate(table: &mut StateTable, v: u64) {
        table
            .upsert(&rows(&[&format!("k{}", v % 5)], &[v as i64]))
            .unwrap();
        let victim = format!("k{}", (v + 2) % 5);
        let mask: BooleanArray = (0..table.len())
            .map(|i| {
                let k = table
                    .data()
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap();
                Some(k.value(i) == victim)
            })
            .collect();
        table.remove_where(&mask).unwrap();
    }

    #[test]
    fn versions_snapshots_deltas_and_retention() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            snapshot_interval: 3,
            retain_versions: 4,
        };
        let (mut store, mut table) = open(dir.path(), None, options).unwrap();
        let mut expected = Vec::new();
        for v in 0..12u64 {
            mutate(&mut table, v);
            store.commit(v, &mut table).unwrap();
            expected.push(contents(&table));
        }
        let files = StateStore::list_versions(dir.path()).unwrap();
        // Version 11 keeps 8..=11 loadable: snapshot 6 is the base; older files are gone.
        assert_eq!(*files.keys().next().unwrap(), 6);
        assert!(files[&6].snapshot_bytes.is_some() && files[&9].snapshot_bytes.is_some());
        assert!(!files.contains_key(&0));
        for v in 8..12u64 {
            let (_, loaded) = open(dir.path(), Some(v), options).unwrap();
            assert_eq!(contents(&loaded), expected[v as usize], "version {v}");
        }
        assert!(open(dir.path(), Some(2), options).is_err());
        assert!(store.current_version_size_bytes() > 0);
    }

    #[test]
    fn by_default_the_store_keeps_every_version_and_purge_tree_applies_retention() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("0");
        let options = StoreOptions {
            snapshot_interval: 3,
            ..StoreOptions::default()
        };
        let (mut store, mut table) = open(&dir, None, options).unwrap();
        let mut expected = Vec::new();
        for v in 0..12u64 {
            mutate(&mut table, v);
            store.commit(v, &mut table).unwrap();
            expected.push(contents(&table));
        }
        assert!(StateStore::list_versions(&dir).unwrap().contains_key(&0));
        // What the engine does after commits/11 with min_batches_to_retain = 4.
        assert!(purge_tree(root.path(), 11, 4) > 0);
        let files = StateStore::list_versions(&dir).unwrap();
        assert_eq!(*files.keys().next().unwrap(), 6);
        for v in 8..12u64 {
            let (_, loaded) = open(&dir, Some(v), options).unwrap();
            assert_eq!(contents(&loaded), expected[v as usize], "version {v}");
        }
        assert_eq!(purge_tree(root.path(), 11, 4), 0);
    }

    #[test]
    fn crashed_attempt_files_are_ignored_and_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            snapshot_interval: 2,
            retain_versions: 10,
        };
        let (mut store, mut table) = open(dir.path(), None, options).unwrap();
        table.upsert(&rows(&["a"], &[1])).unwrap();
        store.commit(0, &mut table).unwrap();
        table.upsert(&rows(&["b"], &[2])).unwrap();
        store.commit(1, &mut table).unwrap();
        // Attempt of batch 2 writes version 2 (a snapshot version) and crashes before commits/2.
        table.upsert(&rows(&["garbage"], &[99])).unwrap();
        store.commit(2, &mut table).unwrap();
        // Restart from version 1: version 2 on disk is ignored.
        let (mut store, mut table) = open(dir.path(), Some(1), options).unwrap();
        assert_eq!(contents(&table), vec![("a".into(), 1), ("b".into(), 2)]);
        table.upsert(&rows(&["c"], &[3])).unwrap();
        store.commit(2, &mut table).unwrap();
        let (_, loaded) = open(dir.path(), Some(2), options).unwrap();
        assert_eq!(
            contents(&loaded),
            vec![("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]
        );
    }

    #[test]
    fn renaming_an_aggregate_alias_is_not_a_change() {
        let saved = Fingerprint::default().with("aggregates", "count(*) AS n, sum(v) AS total");
        let renamed =
            Fingerprint::default().with("aggregates", "count(*) AS num, sum(v)  AS amount");
        assert!(renamed.diff(&saved).is_empty());
        let changed = Fingerprint::default().with("aggregates", "count(*) AS n, avg(v) AS total");
        assert_eq!(changed.diff(&saved).len(), 1);
        let added = Fingerprint::default()
            .with("aggregates", "count(*) AS n, sum(v) AS total, max(v) AS m");
        assert_eq!(added.diff(&saved).len(), 1);
    }

    #[test]
    fn changed_fingerprint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut table) = open(dir.path(), None, StoreOptions::default()).unwrap();
        table.upsert(&rows(&["a"], &[1])).unwrap();
        store.commit(0, &mut table).unwrap();
        let err = StateStore::open(
            dir.path(),
            "stateStoreSave",
            &fp("update"),
            schema(),
            1,
            Some(0),
            StoreOptions::default(),
        )
        .err()
        .unwrap();
        let text = err.to_string();
        assert_eq!(err.kind(), crate::error::ErrorKind::CheckpointIncompatible);
        assert!(
            text.contains("output_mode changed from `append` to `update`"),
            "{text}"
        );
        assert!(
            text.contains("new checkpoint") && text.contains("revert"),
            "{text}"
        );

        // Same fingerprint, other state types (e.g. an input column changed type).
        let other = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Float64, false),
        ]));
        let err = StateStore::open(
            dir.path(),
            "stateStoreSave",
            &fp("append"),
            other,
            1,
            Some(0),
            StoreOptions::default(),
        )
        .err()
        .unwrap();
        assert!(
            err.to_string().contains("state column `v` is Int64"),
            "{err}"
        );

        // An operator with no state in a checkpoint that has committed batches.
        let empty = tempfile::tempdir().unwrap();
        let err = open(empty.path(), Some(3), StoreOptions::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("added to the flow"), "{err}");
    }
}
