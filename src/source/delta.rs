//! The Delta streaming source: Spark's `DeltaSource` (docs/delta-source.md).
//!
//! A flow streams the data files a Delta table gains, commit by commit. The
//! position in the table is a [`DeltaOffset`] in the JSON shape of Spark's
//! `DeltaSourceOffset`: (table version, index of the action within the version,
//! whether the position is inside the initial snapshot).
//!
//! ```text
//!  refresh ─► start position ─► walk units in order ────────────────► PlannedDeltaBatch
//!   (latest)   (from, or pinned:  snapshot(V) files (sorted), then      end offset, files,
//!               snapshot/V/latest) commit V+1.. adds with dataChange    backlog
//!                                  bounded by max files / max bytes
//! ```
//!
//! Each commit is classified once (and cached) from its actions, read through
//! `LogStore::read_commit_entry` and parsed by `deltalake::logstore::get_actions`:
//!
//! - adds with `dataChange = true` and no remove with `dataChange = true`: an
//!   append; its adds are read in the order they appear in the commit;
//! - a remove with `dataChange = true` (DELETE, UPDATE, MERGE, overwrite): a
//!   rewrite, refused with an error naming the version and operation, or skipped
//!   whole with `skip_change_commits`;
//! - nothing with `dataChange = true` (OPTIMIZE, metadata, txn-only): skipped.
//!
//! Files are read with the table's schema as the source first loaded it; a later
//! commit whose `metaData` sets another schema stops the stream before that commit
//! (Spark does the same), and the next run, which loads the newer schema, goes on.
//!
//! Determinism: planning from the same offset against the same table state gives
//! the same end offset, and [`DeltaSource::files_between`] re-derives the files of
//! any recorded `(start, end]` from the two offsets and the table alone. For the
//! query's first batch (no start offset) that needs one rule: the first batch
//! covers one unit only (the initial snapshot, or one commit) and its end offset
//! is not moved on to the next version, so the end alone says where the query
//! started.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use deltalake::DeltaTable;
use deltalake::kernel::{Action, StructType};
use futures::StreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::{DeltaSourceOptions, StartingVersion};

/// The offset format version weir writes (Spark's `DeltaSourceOffset.VERSION_1`).
pub const SOURCE_VERSION: u64 = 1;
/// The index before the first action of a version (Spark's `BASE_INDEX` in offset version 1).
pub const BASE_INDEX: i64 = -1;
/// A position in a Delta table, in the JSON shape of Spark's `DeltaSourceOffset`:
/// everything up to and including action `index` of `reservoirVersion` has been
/// read. With `isStartingVersion` the position is inside the snapshot of the table
/// at `reservoirVersion` (`index` = position in the snapshot's sorted file list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeltaOffset {
    pub source_version: u64,
    /// The table's id (`metaData.id`); an offset of another table is refused.
    pub reservoir_id: String,
    pub reservoir_version: u64,
    pub index: i64,
    pub is_starting_version: bool,
}

impl DeltaOffset {
    /// The offset as JSON (what goes into `offsets/N`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Parses an offset written by [`DeltaOffset::to_json`] (or by Spark, offset version 1).
    pub fn from_json(value: &serde_json::Value) -> std::result::Result<Self, serde_json::Error> {
        serde_json::from_value(value.clone())
    }

    fn position(&self) -> Position {
        Position {
            version: self.reservoir_version,
            index: self.index,
            snapshot: self.is_starting_version,
        }
    }
}

/// A data file to read: an `add` action of a commit, or a file of the initial snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeltaFile {
    /// As in the add action (percent-decoded): relative to the table root, or an absolute URI.
    pub path: String,
    pub size: u64,
    /// The commit that added the file, or the snapshot's version for snapshot files.
    pub version: u64,
    /// Position of the action in its commit, or in the sorted snapshot.
    pub index: i64,
    /// Part of the initial snapshot (offset `isStartingVersion = true`).
    pub is_snapshot: bool,
    /// The add action's `partitionValues` (Delta's string encoding; `None` is null).
    pub partition_values: BTreeMap<String, Option<String>>,
}

/// What stays to read after a batch, up to the table's latest version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backlog {
    /// Versions between the batch's end offset and the latest version (0: caught up).
    pub versions_behind: u64,
    /// Data files not read yet (stops at a rewrite commit the stream cannot pass).
    pub files: u64,
    pub bytes: u64,
}

/// One planned batch.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedDeltaBatch {
    /// The offset planned from (`None` for the query's first batch).
    pub start: Option<DeltaOffset>,
    /// The end offset to record in `offsets/N`.
    pub end: DeltaOffset,
    /// The files in read order (at least one).
    pub files: Vec<DeltaFile>,
    pub backlog: Backlog,
    /// The table's latest version when the batch was planned.
    pub latest_version: u64,
}

impl PlannedDeltaBatch {
    pub fn num_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// How far a plan may go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanBounds {
    /// Ignore `max_files_per_trigger` / `max_bytes_per_trigger` (trigger `once`).
    pub unbounded: bool,
    /// Read no commit after this version (trigger `available_now`: the latest version at start).
    pub until_version: Option<u64>,
}

/// A position; `key()` orders them: the changes of version V, then the snapshot at V
/// (which contains them), then the changes of V + 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    version: u64,
    index: i64,
    snapshot: bool,
}

impl Position {
    fn key(&self) -> (u64, u8, i64) {
        (self.version, u8::from(self.snapshot), self.index)
    }

    fn of_file(f: &DeltaFile) -> Position {
        Position {
            version: f.version,
            index: f.index,
            snapshot: f.is_snapshot,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Snapshot(u64),
    Commit(u64),
}

impl Unit {
    fn version(self) -> u64 {
        match self {
            Unit::Snapshot(v) | Unit::Commit(v) => v,
        }
    }
}

/// What a unit (snapshot or commit) contributes.
#[derive(Debug, Default)]
struct UnitContent {
    /// Files to read, in index order (empty for OPTIMIZE, metadata-only commits, an empty snapshot).
    files: Vec<DeltaFile>,
    /// The commit removes data (a remove with dataChange = true): its operation.
    rewrite: Option<String>,
    /// The table schema set by the commit's `metaData` action, if it has one.
    schema: Option<StructType>,
}

/// The units from a start position up to `horizon`, each with the index after which its files count.
fn units_from(start: Position, horizon: u64) -> Vec<(Unit, i64)> {
    let mut units = Vec::new();
    let first_commit = if start.snapshot {
        units.push((Unit::Snapshot(start.version), start.index));
        start.version + 1
    } else {
        start.version
    };
    for v in first_commit..=horizon {
        let after = if !start.snapshot && v == start.version {
            start.index
        } else {
            BASE_INDEX
        };
        units.push((Unit::Commit(v), after));
    }
    units
}

/// What the last refresh learnt about the table.
#[derive(Debug, Clone)]
struct TableInfo {
    id: String,
    latest: u64,
    /// The read schema (Arrow, every column nullable), fixed when the source first loads the table.
    schema: SchemaRef,
    /// The same in Delta's terms, to compare with `metaData` actions.
    table_schema: StructType,
    /// The version the read schema was taken at.
    schema_version: u64,
    partition_columns: Arc<Vec<String>>,
}

pub struct DeltaSource {
    options: DeltaSourceOptions,
    /// The table root, absolute.
    root: PathBuf,
    table: Option<DeltaTable>,
    info: Option<TableInfo>,
    /// Where a query without an offset starts, fixed by its first plan.
    pinned_start: Option<Position>,
    /// The table did not exist at a plan before the start was pinned.
    saw_missing_table: bool,
    snapshot: Option<(u64, Arc<UnitContent>)>,
    commits: BTreeMap<u64, Arc<UnitContent>>,
    /// The only columns the flow reads (projection pushdown); `None`: every column.
    read_columns: Option<Arc<Vec<String>>>,
    /// When the log was last listed ([`DeltaSource::latest_without_snapshot`]).
    listed_at: Option<std::time::Instant>,
    /// The table's store when it is on an object store, built once (its HTTP client and
    /// connections serve every batch's reads).
    remote: std::sync::OnceLock<crate::storage::Store>,
}

/// How often an idle source lists the Delta log as well as probing for the next commit.
const LISTING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

impl DeltaSource {
    /// A source on the table at `options.path`; nothing is read until the first plan.
    pub fn new(options: DeltaSourceOptions) -> Self {
        let root = if crate::storage::location::is_remote_text(&options.path.to_string_lossy()) {
            options.path.clone()
        } else {
            std::path::absolute(&options.path).unwrap_or_else(|_| options.path.clone())
        };
        DeltaSource {
            options,
            root,
            table: None,
            info: None,
            pinned_start: None,
            saw_missing_table: false,
            snapshot: None,
            commits: BTreeMap::new(),
            read_columns: None,
            listed_at: None,
            remote: std::sync::OnceLock::new(),
        }
    }

    pub fn options(&self) -> &DeltaSourceOptions {
        &self.options
    }

    /// Spark's description: `DeltaSource[file:/...]`.
    pub fn description(&self) -> String {
        let shown = if crate::storage::location::is_remote_text(&self.root.to_string_lossy()) {
            self.root.display().to_string()
        } else {
            crate::source::files::file_url(&self.root)
        };
        format!("DeltaSource[{}]", shown.trim_end_matches('/'))
    }

    /// The table's id, once a plan or refresh found the table.
    pub fn table_id(&self) -> Option<&str> {
        self.info.as_ref().map(|i| i.id.as_str())
    }

    /// The latest version seen by the last refresh.
    pub fn latest_version(&self) -> Option<u64> {
        self.info.as_ref().map(|i| i.latest)
    }

    /// The schema batches are read with: the table's schema when the source first found the
    /// table, every column nullable, partition columns where the table schema has them. It
    /// stays fixed for the life of the source (a flow run); a commit that changes the schema
    /// stops the stream before it, and the next run reads with the new schema (as in Spark).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.info.as_ref().map(|i| i.schema.clone())
    }

    fn err(&self, source: deltalake::DeltaTableError) -> Error {
        Error::Delta {
            path: self.options.path.display().to_string(),
            source,
        }
    }

    fn source_error(&self, message: String) -> Error {
        Error::Source {
            path: self.options.path.clone(),
            message,
        }
    }

    /// Loads the table's latest version (incrementally); `None` while no table exists at the path.
    pub async fn refresh(&mut self) -> Result<Option<u64>> {
        if let Some(latest) = self.latest_without_snapshot().await? {
            return Ok(Some(latest));
        }
        match self.table.as_mut() {
            Some(table) => {
                let res = table.update_incremental(None).await;
                res.map_err(|e| self.err(e))?;
            }
            None => match crate::delta::open_existing(&self.options.path).await? {
                Some(table) => self.table = Some(table),
                None => {
                    if self.pinned_start.is_none() {
                        self.saw_missing_table = true;
                    }
                    return Ok(None);
                }
            },
        }
        let Some(table) = self.table.as_ref() else {
            return Ok(None);
        };
        let state = table.snapshot().map_err(|e| self.err(e))?;
        let metadata = state.metadata();
        if let Some(mode) = crate::delta::column_mapping_mode(metadata.configuration()) {
            return Err(self.source_error(format!(
                "the table uses column mapping (delta.columnMapping.mode = {mode}), which the Delta source does not read yet"
            )));
        }
        let id = metadata.id().to_string();
        let latest = state.version();
        match self.info.as_mut() {
            // The read schema stays as first loaded; only the latest version moves.
            Some(info) if info.id == id => {
                info.latest = latest;
                return Ok(Some(latest));
            }
            Some(_) => {
                // The table was replaced: nothing known about the old one applies.
                self.snapshot = None;
                self.commits.clear();
                self.pinned_start = None;
            }
            None => {}
        }
        let partition_columns = Arc::new(metadata.partition_columns().to_vec());
        let arrow_schema = state.snapshot().arrow_schema();
        let schema: SchemaRef = Arc::new(Schema::new(
            arrow_schema
                .fields()
                .iter()
                .map(|f| Arc::new(Field::clone(f).with_nullable(true)))
                .collect::<Vec<_>>(),
        ));
        self.info = Some(TableInfo {
            id,
            latest,
            schema,
            table_schema: state.schema().as_ref().clone(),
            schema_version: latest,
            partition_columns,
        });
        Ok(Some(latest))
    }

    /// The steady state's refresh: the new commits, probed one by one (and the log's
    /// listing every [`LISTING_INTERVAL`] while nothing is new), and their actions (read through the log store and kept for planning), without
    /// updating the loaded snapshot. deltalake keeps a snapshot's whole file list
    /// materialised and rebuilds it on every update, which grows with the table (about 12
    /// ms a refresh at 400 files, against 3 ms for the listing; BENCHMARKS.md "Multi-hop
    /// latency"); the stream needs only the new commits. `None` when the full refresh is
    /// needed: nothing loaded yet, the log no longer holds the known latest version (the
    /// table was replaced), or a new commit carries a `metaData` action (schema, table id or
    /// configuration may have changed).
    async fn latest_without_snapshot(&mut self) -> Result<Option<u64>> {
        let (Some(table), Some(info)) = (self.table.as_ref(), self.info.as_ref()) else {
            return Ok(None);
        };
        let known = info.latest;
        // The commits after the known version, read one by one while they exist: the cost
        // follows the new commits, where a listing of `_delta_log` grows with the log
        // (about 20 ms at 900 versions). A commit file appears whole or not at all (Delta
        // commits are put-if-absent), so a missing one means no newer commit yet.
        let mut latest = known;
        loop {
            let next = latest + 1;
            if !self.commits.contains_key(&next) {
                match self.read_commit(next).await {
                    Ok(Some(content)) => {
                        self.commits.insert(next, Arc::new(content));
                    }
                    Ok(None) => break,
                    Err(_) => return Ok(None),
                }
            }
            latest = next;
        }
        // While nothing is new, the log is listed now and then as well: that sees a
        // table replaced at the path (its versions start again), which probing cannot.
        if latest == known
            && self
                .listed_at
                .is_none_or(|t| t.elapsed() >= LISTING_INTERVAL)
        {
            self.listed_at = Some(std::time::Instant::now());
            match table.log_store().get_latest_version(known).await {
                Ok(listed) if listed >= known => latest = listed,
                _ => return Ok(None),
            }
        }
        for v in known + 1..=latest {
            if self.unit(Unit::Commit(v)).await?.schema.is_some() {
                return Ok(None);
            }
        }
        if let Some(info) = self.info.as_mut() {
            info.latest = latest;
        }
        Ok(Some(latest))
    }

    fn info(&self) -> Result<&TableInfo> {
        self.info
            .as_ref()
            .ok_or_else(|| self.source_error("the Delta table is not loaded".into()))
    }

    /// Plans the next batch after `from` (`None`: the query's first batch), bounded by
    /// the options. `None` when there is nothing new to read (or no table yet).
    pub async fn plan(&mut self, from: Option<&DeltaOffset>) -> Result<Option<PlannedDeltaBatch>> {
        self.plan_with(from, PlanBounds::default()).await
    }

    /// [`DeltaSource::plan`] with explicit bounds (trigger `once` / `available_now`).
    pub async fn plan_with(
        &mut self,
        from: Option<&DeltaOffset>,
        bounds: PlanBounds,
    ) -> Result<Option<PlannedDeltaBatch>> {
        let Some(latest) = self.refresh().await? else {
            if let Some(from) = from {
                return Err(self.source_error(format!(
                    "no Delta table at the path any more, but the stream has read it up to version {}",
                    from.reservoir_version
                )));
            }
            return Ok(None);
        };
        let horizon = bounds.until_version.map_or(latest, |v| v.min(latest));
        let (start, first) = match from {
            Some(offset) => (self.position_of(offset, latest)?, false),
            None => match self.initial_position(latest, horizon).await? {
                Some(p) => (p, true),
                None => return Ok(None),
            },
        };
        self.evict_before(start);

        let (max_files, max_bytes) = if bounds.unbounded {
            (u64::MAX, None)
        } else {
            (
                self.options.max_files_per_trigger.max(1),
                self.options.max_bytes_per_trigger,
            )
        };
        let mut taken: Vec<DeltaFile> = Vec::new();
        let mut bytes = 0u64;
        // Whether the last file taken is the last of its unit.
        let mut last_of_unit = false;
        'units: for (unit, after) in units_from(start, horizon) {
            let content = self.unit(unit).await?;
            let version = unit.version();
            if let Some(message) = self.schema_change(version, &content) {
                if taken.is_empty() {
                    return Err(self.source_error(message));
                }
                // Read what comes before it with the current schema first.
                break 'units;
            }
            if let Some(operation) = &content.rewrite {
                if self.options.skip_change_commits {
                    continue;
                }
                if taken.is_empty() {
                    return Err(self.rewrite_error(version, operation));
                }
                // Deliver the appends before it; the next plan stops at the rewrite.
                break 'units;
            }
            for (i, file) in content.files.iter().enumerate() {
                if file.index <= after {
                    continue;
                }
                let over_files = taken.len() as u64 >= max_files;
                let over_bytes =
                    max_bytes.is_some_and(|max| !taken.is_empty() && bytes + file.size > max);
                if over_files || over_bytes {
                    break 'units;
                }
                bytes += file.size;
                taken.push(file.clone());
                last_of_unit = i + 1 == content.files.len();
            }
            if first && !taken.is_empty() {
                break 'units;
            }
        }
        let Some(last) = taken.last() else {
            if first && self.options.starting_version.is_some() {
                // A query told where to start (`starting_version`) found nothing to read
                // yet: its start is recorded now, as a batch without files, so that the
                // next run reads on from it instead of deciding again ("latest" would
                // then skip every commit made in between).
                let id = self.info()?.id.clone();
                let backlog = self.backlog_after(start, latest).await?;
                return Ok(Some(PlannedDeltaBatch {
                    start: None,
                    end: offset(&id, start),
                    files: Vec::new(),
                    backlog,
                    latest_version: latest,
                }));
            }
            return Ok(None);
        };
        let id = self.info()?.id.clone();
        // Spark moves an offset that ends a version on to (version + 1, BASE_INDEX), so the
        // next plan need not look at that version again. Not for the first batch: its end
        // must say where the query started (see `files_between`).
        let end_position = if last_of_unit && !first {
            Position {
                version: last.version + 1,
                index: BASE_INDEX,
                snapshot: false,
            }
        } else {
            Position::of_file(last)
        };
        let end = offset(&id, end_position);
        let backlog = self.backlog_after(end_position, latest).await?;
        Ok(Some(PlannedDeltaBatch {
            start: from.cloned(),
            end,
            files: taken,
            backlog,
            latest_version: latest,
        }))
    }

    /// The files of a recorded batch `(start, end]`, derived from the two offsets and the
    /// table (replay after a crash). `start = None` is the query's first batch.
    pub async fn files_between(
        &mut self,
        start: Option<&DeltaOffset>,
        end: &DeltaOffset,
    ) -> Result<Vec<DeltaFile>> {
        let Some(latest) = self.refresh().await? else {
            return Err(self.source_error(format!(
                "no Delta table at the path any more, but a batch up to version {} is to be re-read",
                end.reservoir_version
            )));
        };
        let end_pos = self.position_of(end, latest)?;
        if start.is_none() && !end_pos.snapshot && end_pos.index == BASE_INDEX {
            // The first batch of a query with a `starting_version` that found nothing:
            // it only records where the query starts.
            return Ok(Vec::new());
        }
        let start_pos = match start {
            Some(s) => self.position_of(s, latest)?,
            // A first batch covers one unit, and its end offset stays in it.
            None => Position {
                version: end_pos.version,
                index: BASE_INDEX,
                snapshot: end_pos.snapshot,
            },
        };
        if start_pos.key() > end_pos.key()
            || (end_pos.snapshot && !(start_pos.snapshot && start_pos.version == end_pos.version))
        {
            return Err(self.source_error(format!(
                "cannot re-read the batch between offsets {} and {}: the end is before the start",
                start.map_or("none".to_string(), |s| s.to_json().to_string()),
                end.to_json()
            )));
        }
        // The last commit that can hold files at or before the end.
        let horizon = if end_pos.snapshot || end_pos.index > BASE_INDEX {
            Some(end_pos.version)
        } else {
            end_pos.version.checked_sub(1)
        };
        let Some(horizon) = horizon else {
            return Ok(Vec::new());
        };
        let mut files = Vec::new();
        for (unit, after) in units_from(start_pos, horizon) {
            let content = self.unit(unit).await?;
            // No schema check: a recorded range was planned before any schema change it
            // could meet, and a restarted source reads with the newest schema.
            if let Some(operation) = &content.rewrite {
                if self.options.skip_change_commits {
                    continue;
                }
                return Err(self.rewrite_error(unit.version(), operation));
            }
            files.extend(
                content
                    .files
                    .iter()
                    .filter(|f| f.index > after && Position::of_file(f).key() <= end_pos.key())
                    .cloned(),
            );
        }
        Ok(files)
    }

    /// Reads only `columns` of the table from now on (projection pushdown: the flow
    /// reads nothing else); `None` reads every column. Planning, offsets and the
    /// schema ([`DeltaSource::schema`]) are unchanged: only the batches read are narrower.
    pub fn read_only(&mut self, columns: Option<Vec<String>>) {
        self.read_columns = columns.map(Arc::new);
    }

    /// A reader for the table's files with the read schema ([`DeltaSource::schema`]),
    /// narrowed to the columns of [`DeltaSource::read_only`]; sendable across tasks.
    pub fn reader(&self) -> Result<DeltaBatchReader> {
        let info = self.info()?;
        let schema = match &self.read_columns {
            None => info.schema.clone(),
            Some(columns) => Arc::new(Schema::new(
                info.schema
                    .fields()
                    .iter()
                    .filter(|f| columns.contains(f.name()))
                    .cloned()
                    .collect::<Vec<_>>(),
            )),
        };
        let remote = match (
            self.remote.get(),
            crate::storage::Location::from_path(&self.options.path),
        ) {
            (Some(store), _) => Some(store.clone()),
            (None, Ok(location)) if location.is_remote() => {
                let store = crate::storage::Store::for_location(
                    &location,
                    &crate::storage::StorageOptions::new(),
                )
                .map_err(|source| Error::Storage {
                    role: crate::error::StorageRole::Source,
                    source,
                })?;
                Some(self.remote.get_or_init(|| store).clone())
            }
            _ => None,
        };
        Ok(DeltaBatchReader {
            table: self.options.path.clone(),
            root: self.root.clone(),
            remote,
            schema,
            partition_columns: info.partition_columns.clone(),
        })
    }

    /// Reads the files of a batch in parallel, in planning order.
    pub async fn read(&self, files: &[DeltaFile]) -> Result<Vec<RecordBatch>> {
        self.reader()?.read(files).await
    }

    /// A commit after the read schema was taken that sets another schema (Spark stops the
    /// query there too): the message for it.
    fn schema_change(&self, version: u64, content: &UnitContent) -> Option<String> {
        let info = self.info.as_ref()?;
        let schema = content.schema.as_ref()?;
        if version <= info.schema_version || *schema == info.table_schema {
            return None;
        }
        Some(format!(
            "the table's schema changed at version {version}: {} (the stream reads with the schema of version {}); \
             restart the flow to read on with the new schema (the stream resumes at version {version}, nothing is lost)",
            schema_diff(&info.table_schema, schema),
            info.schema_version
        ))
    }

    /// The earliest version from which every commit up to the latest still has all its
    /// data files (VACUUM removes files no longer in the table); `None` when even the
    /// latest commit misses one. At most 10,000 commits are looked at.
    pub async fn earliest_readable_version(&mut self) -> Result<Option<u64>> {
        let Some(latest) = self.refresh().await? else {
            return Ok(None);
        };
        let reader = self.reader()?;
        let mut earliest = None;
        for v in (latest.saturating_sub(10_000)..=latest).rev() {
            let Ok(content) = self.unit(Unit::Commit(v)).await else {
                break;
            };
            let complete = content
                .files
                .iter()
                .all(|f| reader.resolve(f).is_ok_and(|p| p.exists()));
            if !complete {
                break;
            }
            earliest = Some(v);
        }
        Ok(earliest)
    }

    fn rewrite_error(&self, version: u64, operation: &str) -> Error {
        self.source_error(format!(
            "the table was rewritten at version {version} ({operation}); streaming reads only appends. \
             Set skip_change_commits = true to ignore such commits, Delta's skipChangeCommits"
        ))
    }

    /// Checks an offset against the table and turns it into a position.
    fn position_of(&self, offset: &DeltaOffset, latest: u64) -> Result<Position> {
        let info = self.info()?;
        if offset.source_version != SOURCE_VERSION {
            return Err(self.source_error(format!(
                "offset {}: sourceVersion {} is not supported (weir reads and writes version {SOURCE_VERSION})",
                offset.to_json(),
                offset.source_version
            )));
        }
        if offset.reservoir_id != info.id {
            return Err(self.source_error(format!(
                "the checkpoint read Delta table {} but the table at this path is {}: it was deleted and \
                 created again. Start the flow with a new checkpoint to read the new table",
                offset.reservoir_id, info.id
            )));
        }
        let p = offset.position();
        let valid = p.index >= BASE_INDEX
            && if p.snapshot {
                p.version <= latest
            } else {
                p.version <= latest || (p.version == latest + 1 && p.index == BASE_INDEX)
            };
        if !valid {
            return Err(self.source_error(format!(
                "offset {} is beyond the table's latest version {latest}",
                offset.to_json()
            )));
        }
        Ok(p)
    }

    /// The start of a query without an offset: fixed by its first plan, kept for the
    /// life of the source. With a `starting_version` it is recorded in the checkpoint
    /// by the first plan even when there is nothing to read (a batch without files), so
    /// a restart never decides again.
    async fn initial_position(&mut self, latest: u64, horizon: u64) -> Result<Option<Position>> {
        if let Some(p) = self.pinned_start {
            return Ok(Some(p));
        }
        let p = match self.options.starting_version {
            None => {
                let content = self.unit(Unit::Snapshot(horizon)).await?;
                if content.files.is_empty() {
                    // An empty table: the query starts with the first snapshot that has files.
                    self.snapshot = None;
                    return Ok(None);
                }
                Position {
                    version: horizon,
                    index: BASE_INDEX,
                    snapshot: true,
                }
            }
            Some(StartingVersion::Version(v)) => {
                if v > latest {
                    return Err(self.source_error(format!(
                        "starting_version {v} is after the table's latest version {latest}"
                    )));
                }
                Position {
                    version: v,
                    index: BASE_INDEX,
                    snapshot: false,
                }
            }
            Some(StartingVersion::Latest) => Position {
                // A table created after the query started: all its commits are new.
                version: if self.saw_missing_table {
                    0
                } else {
                    latest + 1
                },
                index: BASE_INDEX,
                snapshot: false,
            },
        };
        self.pinned_start = Some(p);
        Ok(Some(p))
    }

    fn evict_before(&mut self, start: Position) {
        self.commits.retain(|v, _| *v >= start.version);
        if !start.snapshot {
            self.snapshot = None;
        }
    }

    async fn backlog_after(&mut self, end: Position, latest: u64) -> Result<Backlog> {
        let mut backlog = Backlog {
            versions_behind: if !end.snapshot && end.index == BASE_INDEX {
                (latest + 1).saturating_sub(end.version)
            } else {
                latest.saturating_sub(end.version)
            },
            ..Backlog::default()
        };
        for (unit, after) in units_from(end, latest) {
            let content = self.unit(unit).await?;
            if content.rewrite.is_some() && !self.options.skip_change_commits {
                // The stream cannot go past it.
                break;
            }
            if content.rewrite.is_some() {
                continue;
            }
            for f in content.files.iter().filter(|f| f.index > after) {
                backlog.files += 1;
                backlog.bytes += f.size;
            }
        }
        Ok(backlog)
    }

    async fn unit(&mut self, unit: Unit) -> Result<Arc<UnitContent>> {
        match unit {
            Unit::Snapshot(v) => {
                if let Some((sv, content)) = &self.snapshot
                    && *sv == v
                {
                    return Ok(content.clone());
                }
                let content = Arc::new(self.load_snapshot(v).await?);
                self.snapshot = Some((v, content.clone()));
                Ok(content)
            }
            Unit::Commit(v) => {
                if let Some(content) = self.commits.get(&v) {
                    return Ok(content.clone());
                }
                let content = Arc::new(self.load_commit(v).await?);
                self.commits.insert(v, content.clone());
                Ok(content)
            }
        }
    }

    /// The files of the table at version `v`, ordered as Spark orders the initial
    /// snapshot: by modification time, then path.
    async fn load_snapshot(&self, v: u64) -> Result<UnitContent> {
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| self.source_error("the Delta table is not loaded".into()))?;
        let older;
        let state = if table.version() == Some(v) {
            table.snapshot().map_err(|e| self.err(e))?
        } else {
            let log_store = table.log_store();
            older = deltalake::table::state::DeltaTableState::try_new(log_store.as_ref(), Some(v))
                .await
                .map_err(|e| self.err(e))?;
            &older
        };
        let mut listed = Vec::new();
        for view in state.log_data().iter() {
            if view.deletion_vector_descriptor().is_some() {
                return Err(self.source_error(format!(
                    "data file {} of version {v} has a deletion vector, which the Delta source does not read yet",
                    view.path()
                )));
            }
            listed.push((
                view.modification_time(),
                view.path().into_owned(),
                view.size().max(0) as u64,
                view.partition_values_map().into_iter().collect(),
            ));
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        Ok(UnitContent {
            files: listed
                .into_iter()
                .enumerate()
                .map(|(i, (_, path, size, partition_values))| DeltaFile {
                    path,
                    size,
                    version: v,
                    index: i as i64,
                    is_snapshot: true,
                    partition_values,
                })
                .collect(),
            ..UnitContent::default()
        })
    }

    /// Reads commit `v`'s actions through the log store and classifies the commit.
    async fn load_commit(&self, v: u64) -> Result<UnitContent> {
        self.read_commit(v).await?.ok_or_else(|| {
            self.source_error(format!(
                "commit {v} is no longer in the Delta log (removed by log retention?); the stream \
                 cannot go on from its offset. Start the flow with a new checkpoint"
            ))
        })
    }

    /// Commit `v`'s actions, classified; `None` when the log has no commit `v` (yet).
    async fn read_commit(&self, v: u64) -> Result<Option<UnitContent>> {
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| self.source_error("the Delta table is not loaded".into()))?;
        let log_store = table.log_store();
        let Some(bytes) = log_store
            .read_commit_entry(v as _)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        let actions = deltalake::logstore::get_actions(v as _, &bytes).map_err(|e| self.err(e))?;
        let content = classify(v, actions).map_err(|m| self.source_error(m))?;
        if let Some(operation) = &content.rewrite
            && self.options.skip_change_commits
        {
            tracing::info!(version = v, %operation, table = %self.options.path.display(),
                "skipping a commit that rewrites data (skip_change_commits = true)");
        }
        Ok(Some(content))
    }
}

fn offset(id: &str, p: Position) -> DeltaOffset {
    DeltaOffset {
        source_version: SOURCE_VERSION,
        reservoir_id: id.to_string(),
        reservoir_version: p.version,
        index: p.index,
        is_starting_version: p.snapshot,
    }
}

/// Classifies a commit by its actions (Spark's `validateCommitAndDecideSkipping`).
/// What a schema change did, named: `new column(s) coupon STRING; removed ...; type of x ...`.
fn schema_diff(old: &StructType, new: &StructType) -> String {
    let mut parts = Vec::new();
    let added: Vec<String> = new
        .fields()
        .filter(|f| old.field(f.name()).is_none())
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    if !added.is_empty() {
        parts.push(format!("new column(s) {}", added.join(", ")));
    }
    let removed: Vec<&str> = old
        .fields()
        .filter(|f| new.field(f.name()).is_none())
        .map(|f| f.name().as_str())
        .collect();
    if !removed.is_empty() {
        parts.push(format!("column(s) removed: {}", removed.join(", ")));
    }
    let changed: Vec<String> = new
        .fields()
        .filter_map(|f| {
            let before = old.field(f.name())?;
            (before.data_type() != f.data_type())
                .then(|| format!("{} {} -> {}", f.name(), before.data_type(), f.data_type()))
        })
        .collect();
    if !changed.is_empty() {
        parts.push(format!("type changed: {}", changed.join(", ")));
    }
    if parts.is_empty() {
        "column properties changed (nullability or metadata)".to_string()
    } else {
        parts.join("; ")
    }
}

fn classify(version: u64, actions: Vec<Action>) -> std::result::Result<UnitContent, String> {
    let mut adds = Vec::new();
    let mut removes_data = false;
    let mut operation: Option<String> = None;
    let mut mode: Option<String> = None;
    let mut schema: Option<StructType> = None;
    for (index, action) in actions.into_iter().enumerate() {
        match action {
            Action::Add(add) if add.data_change => {
                if add.deletion_vector.is_some() {
                    return Err(format!(
                        "data file {} of version {version} has a deletion vector, which the Delta source does not read yet",
                        add.path
                    ));
                }
                adds.push(DeltaFile {
                    path: add.path,
                    size: add.size.max(0) as u64,
                    version,
                    index: index as i64,
                    is_snapshot: false,
                    partition_values: add.partition_values.into_iter().collect(),
                });
            }
            Action::Remove(remove) if remove.data_change => removes_data = true,
            Action::Metadata(metadata) => {
                schema = Some(metadata.parse_schema().map_err(|e| {
                    format!(
                        "the schema in the metaData action of version {version} is unreadable: {e}"
                    )
                })?);
            }
            Action::CommitInfo(info) => {
                mode = info
                    .operation_parameters
                    .as_ref()
                    .and_then(|p| p.get("mode"))
                    .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_string));
                operation = info.operation;
            }
            _ => {}
        }
    }
    let rewrite = removes_data.then(|| match (operation, mode) {
        (Some(op), Some(mode)) if op == "WRITE" => format!("{op} mode={mode}"),
        (Some(op), _) => op,
        (None, _) => "unknown operation".to_string(),
    });
    Ok(UnitContent {
        // A rewrite's adds are never read: the commit is refused or skipped whole.
        files: if rewrite.is_some() { Vec::new() } else { adds },
        rewrite,
        schema,
    })
}

/// Rows per record batch read from a data file: DataFusion's default batch size (the
/// Parquet reader's own default, 1,024, makes 8x more batches for every operator
/// downstream to go through).
pub const READ_BATCH_ROWS: usize = 8192;

/// Reads a batch's files; see [`DeltaSource::reader`].
#[derive(Debug, Clone)]
pub struct DeltaBatchReader {
    table: PathBuf,
    root: PathBuf,
    /// The table's store when it is on an object store (files are fetched whole, then
    /// decoded; local files are read in place).
    remote: Option<crate::storage::Store>,
    schema: SchemaRef,
    partition_columns: Arc<Vec<String>>,
}

impl DeltaBatchReader {
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Reads the files in parallel (one task per core); the batches come out in file order.
    pub async fn read(&self, files: &[DeltaFile]) -> Result<Vec<RecordBatch>> {
        let parallelism = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        let tasks = futures::stream::iter(files.iter().cloned().map(|file| {
            let reader = self.clone();
            tokio::task::spawn_blocking(move || reader.read_file(&file))
        }))
        .buffered(parallelism);
        let results: Vec<_> = tasks.collect().await;
        let mut out = Vec::new();
        for joined in results {
            let batches = joined.map_err(|e| Error::Source {
                path: self.table.clone(),
                message: format!("a reader task failed: {e}"),
            })??;
            out.extend(batches);
        }
        Ok(out)
    }

    pub fn resolve(&self, file: &DeltaFile) -> Result<PathBuf> {
        if file.path.contains("://") {
            return url::Url::parse(&file.path)
                .ok()
                .and_then(|u| u.to_file_path().ok())
                .ok_or_else(|| Error::Source {
                    path: self.table.clone(),
                    message: format!("data file {} is not on the local file system", file.path),
                });
        }
        Ok(self.root.join(&file.path))
    }

    fn read_file(&self, file: &DeltaFile) -> Result<Vec<RecordBatch>> {
        if let Some(store) = &self.remote {
            return self.read_remote_file(store, file);
        }
        let path = self.resolve(file)?;
        let handle = std::fs::File::open(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                Error::Source {
                    path: self.table.clone(),
                    message: format!(
                        "data file {} (version {}) is gone; VACUUM may have removed it before the stream read it",
                        file.path, file.version
                    ),
                }
            } else {
                Error::SourceIo {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        let parquet_error = |e: parquet::errors::ParquetError| Error::Source {
            path: path.clone(),
            message: format!("cannot read Parquet: {e}"),
        };
        let builder = ParquetRecordBatchReaderBuilder::try_new(handle).map_err(parquet_error)?;
        self.decode(builder, &path.display().to_string(), file)
    }

    /// A data file of a table on an object store: fetched whole (a Delta data file is a
    /// bounded Parquet file), then decoded as a local one is.
    fn read_remote_file(
        &self,
        store: &crate::storage::Store,
        file: &DeltaFile,
    ) -> Result<Vec<RecordBatch>> {
        let rel = percent_encoding::percent_decode_str(&file.path)
            .decode_utf8_lossy()
            .to_string();
        let shown = store.location().join(&rel).to_string();
        let got = tokio::runtime::Handle::current()
            .block_on(store.get(&rel))
            .map_err(|source| Error::Storage {
                role: crate::error::StorageRole::Source,
                source,
            })?;
        let Some(bytes) = got else {
            return Err(Error::Source {
                path: self.table.clone(),
                message: format!(
                    "data file {shown} (version {}) is gone; VACUUM may have removed it before the stream read it",
                    file.version
                ),
            });
        };
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| Error::Source {
                path: PathBuf::from(&shown),
                message: format!("cannot read Parquet: {e}"),
            })?;
        self.decode(builder, &shown, file)
    }

    /// Decodes a data file's columns that the read schema has, conformed to it.
    fn decode<T: parquet::file::reader::ChunkReader + 'static>(
        &self,
        builder: ParquetRecordBatchReaderBuilder<T>,
        shown: &str,
        file: &DeltaFile,
    ) -> Result<Vec<RecordBatch>> {
        let parquet_error = |e: parquet::errors::ParquetError| Error::Source {
            path: PathBuf::from(shown),
            message: format!("cannot read Parquet: {e}"),
        };
        // Only the file's columns the read schema has are decoded (the others would be
        // dropped by `conform`): the read schema is narrower with projection pushdown.
        let wanted: Vec<usize> = builder
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| self.schema.field_with_name(f.name()).is_ok())
            .map(|(i, _)| i)
            .collect();
        let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(READ_BATCH_ROWS)
            .build()
            .map_err(parquet_error)?;
        let mut out = Vec::new();
        for batch in reader {
            let batch = batch.map_err(|source| Error::Arrow {
                context: format!("reading {shown}"),
                source,
            })?;
            out.push(self.conform(&batch, file)?);
        }
        Ok(out)
    }

    /// Puts a file's batch into the table schema: columns by name (cast when the file's
    /// type differs), missing columns as nulls, partition columns from the add action.
    fn conform(&self, batch: &RecordBatch, file: &DeltaFile) -> Result<RecordBatch> {
        let n = batch.num_rows();
        let arrow_error = |context: String| {
            move |source| Error::Arrow {
                context: context.clone(),
                source,
            }
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let name = field.name();
            let column = if self.partition_columns.iter().any(|c| c == name) {
                let value = file
                    .partition_values
                    .get(name)
                    .cloned()
                    .flatten()
                    .filter(|v| !v.is_empty());
                match value {
                    None => new_null_array(field.data_type(), n),
                    Some(v) => {
                        let strings: ArrayRef =
                            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(v, n)));
                        cast(&strings, field.data_type()).map_err(arrow_error(format!(
                            "partition value of {name} in {}",
                            file.path
                        )))?
                    }
                }
            } else {
                match batch.column_by_name(name) {
                    None => new_null_array(field.data_type(), n),
                    Some(c) if c.data_type() == field.data_type() => c.clone(),
                    Some(c) => cast(c, field.data_type())
                        .map_err(arrow_error(format!("column {name} of {}", file.path)))?,
                }
            };
            columns.push(column);
        }
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .map_err(arrow_error(format!("batch from {}", file.path)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::DataType;
    use deltalake::operations::write::SchemaMode;
    use deltalake::protocol::SaveMode;

    use super::*;
    use crate::spec::{DeltaSourceOptions, StartingVersion};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("p", DataType::Utf8, true),
        ]))
    }

    /// Appends rows `(id, p)` in one commit; with `partitioned`, one file per distinct `p`.
    async fn append(path: &Path, rows: &[(i64, &str)], partitioned: bool) -> u64 {
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let table = crate::delta::open_table(path).await.unwrap();
        let mut builder = table.write(vec![batch]).with_save_mode(SaveMode::Append);
        if partitioned {
            builder = builder.with_partition_columns(vec!["p".to_string()]);
        }
        builder.await.unwrap().version().unwrap()
    }

    /// Appends ids `range`, spread over `files` partitions (one file each).
    async fn append_ids(path: &Path, range: std::ops::Range<i64>, files: usize) -> u64 {
        let parts = ["a", "b", "c", "d", "e"];
        let names: Vec<String> = range
            .clone()
            .map(|i| parts[(i as usize) % files].to_string())
            .collect();
        let rows: Vec<(i64, &str)> = range.zip(names.iter().map(String::as_str)).collect();
        append(path, &rows, true).await
    }

    fn source(path: &Path, configure: impl FnOnce(&mut DeltaSourceOptions)) -> DeltaSource {
        let mut options = DeltaSourceOptions::new(path);
        configure(&mut options);
        DeltaSource::new(options)
    }

    /// Plans until nothing is left; every batch is returned with its start.
    async fn drain(src: &mut DeltaSource, from: Option<DeltaOffset>) -> Vec<PlannedDeltaBatch> {
        let mut batches = Vec::new();
        let mut from = from;
        while let Some(batch) = src.plan(from.as_ref()).await.unwrap() {
            from = Some(batch.end.clone());
            batches.push(batch);
            assert!(batches.len() < 1000, "planning does not terminate");
        }
        batches
    }

    async fn ids(src: &DeltaSource, files: &[DeltaFile]) -> Vec<i64> {
        let batches = src.read(files).await.unwrap();
        let mut out = Vec::new();
        for b in &batches {
            let col = b
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            out.extend(col.iter().flatten());
        }
        out
    }

    fn all_files(batches: &[PlannedDeltaBatch]) -> Vec<DeltaFile> {
        batches.iter().flat_map(|b| b.files.clone()).collect()
    }

    fn sorted(mut v: Vec<i64>) -> Vec<i64> {
        v.sort_unstable();
        v
    }

    fn assert_once(files: &[DeltaFile]) {
        let mut seen = BTreeSet::new();
        for f in files {
            assert!(seen.insert(f.path.clone()), "{} read twice", f.path);
        }
    }

    #[test]
    fn offset_json_has_sparks_shape() {
        let offset = DeltaOffset {
            source_version: 1,
            reservoir_id: "0b4c4a3e-8e52-4d5d-a0fe-6f9b1b1d7c11".into(),
            reservoir_version: 7,
            index: -1,
            is_starting_version: false,
        };
        assert_eq!(
            offset.to_json().to_string(),
            r#"{"sourceVersion":1,"reservoirId":"0b4c4a3e-8e52-4d5d-a0fe-6f9b1b1d7c11","reservoirVersion":7,"index":-1,"isStartingVersion":false}"#
        );
        // As Spark writes it into offsets/N.
        let spark: serde_json::Value = serde_json::from_str(
            r#"{"sourceVersion":1,"reservoirId":"0b4c4a3e-8e52-4d5d-a0fe-6f9b1b1d7c11","reservoirVersion":7,"index":-1,"isStartingVersion":false}"#,
        )
        .unwrap();
        assert_eq!(DeltaOffset::from_json(&spark).unwrap(), offset);
    }

    #[tokio::test]
    async fn no_table_yet_plans_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing");
        let mut src = source(&path, |_| {});
        assert!(src.plan(None).await.unwrap().is_none());
        // An empty _delta_log is not a table either.
        std::fs::create_dir_all(path.join("_delta_log")).unwrap();
        assert!(src.plan(None).await.unwrap().is_none());
        // Once the table exists, the first batch is its snapshot.
        append_ids(&path, 0..4, 2).await;
        let batch = src.plan(None).await.unwrap().unwrap();
        assert!(batch.end.is_starting_version);
        assert_eq!(sorted(ids(&src, &batch.files).await), vec![0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn appends_across_versions_are_read_in_order_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        // Version 0: 3 files. The query starts with its snapshot.
        append_ids(&path, 0..30, 3).await;
        let mut src = source(&path, |o| o.max_files_per_trigger = 2);
        let first = drain(&mut src, None).await;
        assert_eq!(first.len(), 2, "3 snapshot files at 2 per batch");
        assert!(first.iter().all(|b| b.files.iter().all(|f| f.is_snapshot)));
        assert_eq!(first[0].end.reservoir_version, 0);
        assert_eq!(first[0].end.index, 1);
        assert!(first[0].end.is_starting_version);
        // Then 8 versions of 1 to 3 files each.
        let mut expected: Vec<i64> = (0..30).collect();
        let mut next = 30;
        for v in 1..=8u64 {
            let n = (v as usize % 3) + 1;
            append_ids(&path, next..next + 10, n).await;
            expected.extend(next..next + 10);
            next += 10;
        }
        let rest = drain(&mut src, first.last().map(|b| b.end.clone())).await;
        let mut batches = first;
        batches.extend(rest);
        for b in &batches {
            assert!(!b.files.is_empty() && b.files.len() <= 2, "{:?}", b.files);
        }
        let files = all_files(&batches);
        assert_once(&files);
        // Commit order, and index order within a version.
        let order: Vec<(u64, u8, i64)> = files.iter().map(|f| Position::of_file(f).key()).collect();
        let mut sorted_order = order.clone();
        sorted_order.sort();
        assert_eq!(order, sorted_order);
        let got = ids(&src, &files).await;
        assert_eq!(got.len(), expected.len(), "every row exactly once");
        assert_eq!(sorted(got), expected);
        // Caught up: the last end offset is past the latest version.
        let last = batches.last().unwrap();
        assert_eq!(last.end.reservoir_version, 9);
        assert_eq!(last.end.index, BASE_INDEX);
        assert_eq!(last.backlog, Backlog::default());
        assert!(src.plan(Some(&last.end)).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn read_only_decodes_just_the_columns_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        // Unpartitioned and partitioned files: `p` is a data column in the first, from
        // the add action's partition values in the others.
        append(&path, &[(1, "x"), (2, "y")], false).await;
        let mut src = source(&path, |_| {});
        let files = all_files(&drain(&mut src, None).await);
        let full = src.read(&files).await.unwrap();
        for (only, expected) in [(vec!["id"], vec!["id"]), (vec!["p", "nope"], vec!["p"])] {
            src.read_only(Some(only.iter().map(|c| c.to_string()).collect()));
            let narrow = src.read(&files).await.unwrap();
            let schema = narrow[0].schema();
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(names, expected);
            assert_eq!(
                narrow[0].column(0).as_ref(),
                full[0].column_by_name(expected[0]).unwrap().as_ref(),
                "the same values as the full read"
            );
        }
        // The schema the flow is planned with stays the table's.
        assert_eq!(src.schema().unwrap().fields().len(), 2);
        src.read_only(None);
        assert_eq!(src.read(&files).await.unwrap(), full);

        let parted = dir.path().join("parted");
        append(&parted, &[(1, "x"), (2, "y")], true).await;
        let mut src = source(&parted, |_| {});
        let files = all_files(&drain(&mut src, None).await);
        src.read_only(Some(vec!["p".to_string()]));
        let mut values: Vec<String> = src
            .read(&files)
            .await
            .unwrap()
            .iter()
            .flat_map(|b| {
                assert_eq!(b.num_columns(), 1);
                b.column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap()
                    .iter()
                    .map(|v| v.unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        values.sort();
        assert_eq!(values, vec!["x", "y"]);
    }

    #[tokio::test]
    async fn partition_columns_and_added_columns_are_filled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, &[(1, "x"), (2, "y z%")], true).await;
        // Version 1 adds a column (schema merge).
        let wide = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("p", DataType::Utf8, true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            wide,
            vec![
                Arc::new(Int64Array::from(vec![3])),
                Arc::new(StringArray::from(vec!["x"])),
                Arc::new(StringArray::from(vec!["hello"])),
            ],
        )
        .unwrap();
        crate::delta::open_table(&path)
            .await
            .unwrap()
            .write(vec![batch])
            .with_save_mode(SaveMode::Append)
            .with_schema_mode(SchemaMode::Merge)
            .await
            .unwrap();
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0))
        });
        let batches = drain(&mut src, None).await;
        let files = all_files(&batches);
        let read = src.read(&files).await.unwrap();
        let table = arrow::compute::concat_batches(&src.schema().unwrap(), &read).unwrap();
        let names: Vec<String> = table
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert!(
            names.contains(&"note".to_string()) && names.contains(&"p".to_string()),
            "{names:?}"
        );
        let mut rows = Vec::new();
        for i in 0..table.num_rows() {
            let id = table
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(i);
            let p = table
                .column_by_name("p")
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .value(i)
                .to_string();
            let note = table
                .column_by_name("note")
                .unwrap()
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            let note = (!note.is_null(i)).then(|| note.value(i).to_string());
            rows.push((id, p, note));
        }
        rows.sort();
        assert_eq!(
            rows,
            vec![
                (1, "x".to_string(), None),
                (2, "y z%".to_string(), None),
                (3, "x".to_string(), Some("hello".to_string())),
            ]
        );
    }

    /// After the first load, a refresh finds new commits from the log alone: the loaded
    /// snapshot stays at its version (no deltalake snapshot update per trigger), the new
    /// commits are read for planning, and a commit with a `metaData` action loads the
    /// table again.
    #[tokio::test]
    async fn refresh_reads_new_commits_without_updating_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, &[(1, "x")], false).await; // 0
        let mut src = source(&path, |_| {});
        assert_eq!(src.refresh().await.unwrap(), Some(0));
        append(&path, &[(2, "x")], false).await; // 1
        append(&path, &[(3, "x")], false).await; // 2
        assert_eq!(src.refresh().await.unwrap(), Some(2));
        assert_eq!(src.latest_version(), Some(2));
        assert_eq!(src.table.as_ref().and_then(|t| t.version()), Some(0));
        assert!(src.commits.contains_key(&1) && src.commits.contains_key(&2));
        let b = src.plan(None).await.unwrap().unwrap();
        assert_eq!(ids(&src, &b.files).await, vec![1, 2, 3]);
        // A metaData commit (a new column): the table is loaded again.
        let wide = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("p", DataType::Utf8, true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            wide,
            vec![
                Arc::new(Int64Array::from(vec![4])),
                Arc::new(StringArray::from(vec!["x"])),
                Arc::new(StringArray::from(vec!["new"])),
            ],
        )
        .unwrap();
        crate::delta::open_table(&path)
            .await
            .unwrap()
            .write(vec![batch])
            .with_save_mode(SaveMode::Append)
            .with_schema_mode(SchemaMode::Merge)
            .await
            .unwrap(); // 3
        assert_eq!(src.refresh().await.unwrap(), Some(3));
        assert_eq!(src.table.as_ref().and_then(|t| t.version()), Some(3));
    }

    #[tokio::test]
    async fn a_schema_change_stops_the_stream_until_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, &[(1, "x")], false).await; // 0
        let mut src = source(&path, |_| {});
        let b0 = src.plan(None).await.unwrap().unwrap();
        append(&path, &[(2, "x")], false).await; // 1
        let wide = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("p", DataType::Utf8, true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            wide,
            vec![
                Arc::new(Int64Array::from(vec![3])),
                Arc::new(StringArray::from(vec!["x"])),
                Arc::new(StringArray::from(vec!["new"])),
            ],
        )
        .unwrap();
        crate::delta::open_table(&path)
            .await
            .unwrap()
            .write(vec![batch])
            .with_save_mode(SaveMode::Append)
            .with_schema_mode(SchemaMode::Merge)
            .await
            .unwrap(); // 2
        // Version 1 is read with the schema the source started with, then the stream stops.
        let b1 = src.plan(Some(&b0.end)).await.unwrap().unwrap();
        assert_eq!(
            b1.files.iter().map(|f| f.version).collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(src.schema().unwrap().fields().len(), 2);
        let err = src.plan(Some(&b1.end)).await.unwrap_err().to_string();
        assert!(err.contains("schema changed at version 2"), "{err}");
        // A restart reads with the new schema and goes on.
        let mut restarted = source(&path, |_| {});
        let b2 = restarted.plan(Some(&b1.end)).await.unwrap().unwrap();
        assert_eq!(restarted.schema().unwrap().fields().len(), 3);
        assert_eq!(ids(&restarted, &b2.files).await, vec![3]);
    }

    #[tokio::test]
    async fn restart_from_a_saved_offset_between_and_within_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append_ids(&path, 0..10, 1).await;
        let mut a = source(&path, |o| o.max_files_per_trigger = 2);
        let b0 = a.plan(None).await.unwrap().unwrap();
        append_ids(&path, 10..20, 3).await; // version 1: 3 files
        append_ids(&path, 20..30, 1).await; // version 2
        let b1 = a.plan(Some(&b0.end)).await.unwrap().unwrap();
        // The bound splits version 1: the offset points inside it.
        assert_eq!(b1.files.len(), 2);
        assert_eq!(b1.end.reservoir_version, 1);
        assert!(!b1.end.is_starting_version && b1.end.index >= 0);
        // The process stops; the checkpoint holds the offset as JSON.
        let saved = b1.end.to_json().to_string();
        drop(a);
        append_ids(&path, 30..40, 2).await; // version 3, while the flow was down
        let mut b = source(&path, |o| o.max_files_per_trigger = 2);
        let from = DeltaOffset::from_json(&serde_json::from_str(&saved).unwrap()).unwrap();
        let rest = drain(&mut b, Some(from)).await;
        let mut files = b0.files.clone();
        files.extend(b1.files.clone());
        files.extend(all_files(&rest));
        assert_once(&files);
        assert_eq!(sorted(ids(&b, &files).await), (0..40).collect::<Vec<_>>());
        // A restart at a version boundary.
        let boundary = rest.iter().find(|r| r.end.index == BASE_INDEX).unwrap();
        let mut c = source(&path, |o| o.max_files_per_trigger = 100);
        let tail = drain(&mut c, Some(boundary.end.clone())).await;
        let after: Vec<DeltaFile> = rest
            .iter()
            .skip_while(|r| r.end != boundary.end)
            .skip(1)
            .flat_map(|r| r.files.clone())
            .collect();
        assert_eq!(all_files(&tail), after);
    }

    #[tokio::test]
    async fn starting_version_reads_changes_from_that_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        for v in 0..4i64 {
            append_ids(&path, v * 10..v * 10 + 10, 1).await;
        }
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(2));
        });
        let batches = drain(&mut src, None).await;
        // The first batch covers one commit.
        assert_eq!(batches[0].files.len(), 1);
        assert_eq!(batches[0].files[0].version, 2);
        assert!(!batches[0].end.is_starting_version);
        assert_eq!(
            sorted(ids(&src, &all_files(&batches)).await),
            (20..40).collect::<Vec<_>>()
        );

        // Beyond the latest version: refused.
        let mut bad = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(9))
        });
        let err = bad.plan(None).await.unwrap_err();
        assert!(err.to_string().contains("starting_version 9"), "{err}");
    }

    #[tokio::test]
    async fn starting_version_latest_reads_only_later_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append_ids(&path, 0..10, 2).await;
        append_ids(&path, 10..20, 2).await;
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Latest)
        });
        // Nothing to read yet: the first plan is a batch without files that records the
        // start (version 2), so a restart does not take "latest" afresh.
        let pin = src.plan(None).await.unwrap().unwrap();
        assert!(pin.files.is_empty());
        assert_eq!(pin.end.reservoir_version, 2);
        assert!(!pin.end.is_starting_version);
        assert!(src.files_between(None, &pin.end).await.unwrap().is_empty());
        append_ids(&path, 20..30, 2).await;
        append_ids(&path, 30..40, 1).await;
        // A new process reads on from the recorded start: version 2 on.
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Latest)
        });
        let batches = drain(&mut src, Some(pin.end.clone())).await;
        assert_eq!(
            sorted(ids(&src, &all_files(&batches)).await),
            (20..40).collect::<Vec<_>>()
        );
        assert_eq!(
            all_files(&batches)
                .iter()
                .map(|f| f.version)
                .collect::<BTreeSet<_>>(),
            [2, 3].into()
        );
    }

    async fn delete_table(path: &Path) -> u64 {
        let table = crate::delta::open_table(path).await.unwrap();
        let (table, _) = table.delete().with_predicate("id < 3").await.unwrap();
        table.version().unwrap()
    }

    #[tokio::test]
    async fn delete_commit_is_refused_then_skipped_with_skip_change_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append_ids(&path, 0..10, 1).await; // 0
        let mut src = source(&path, |_| {});
        let b0 = src.plan(None).await.unwrap().unwrap();
        append_ids(&path, 10..20, 1).await; // 1
        let v = delete_table(&path).await; // 2
        assert_eq!(v, 2);
        append_ids(&path, 20..30, 1).await; // 3

        // The append before the delete is delivered, then the stream stops at it.
        let b1 = src.plan(Some(&b0.end)).await.unwrap().unwrap();
        assert_eq!(
            b1.files.iter().map(|f| f.version).collect::<Vec<_>>(),
            vec![1]
        );
        let err = src.plan(Some(&b1.end)).await.unwrap_err();
        assert!(matches!(err, Error::Source { .. }));
        assert_eq!(err.kind(), crate::error::ErrorKind::SourceError);
        let message = err.to_string();
        assert!(
            message.contains(
                "the table was rewritten at version 2 (DELETE); streaming reads only appends. \
                 Set skip_change_commits = true to ignore such commits, Delta's skipChangeCommits"
            ),
            "{message}"
        );
        // The error does not move the offset: planning again fails the same way.
        assert!(src.plan(Some(&b1.end)).await.is_err());

        // With skip_change_commits, the whole commit is skipped (also the files it re-adds).
        let mut skipping = source(&path, |o| o.skip_change_commits = true);
        let rest = drain(&mut skipping, Some(b1.end.clone())).await;
        let files = all_files(&rest);
        assert!(files.iter().all(|f| f.version == 3), "{files:?}");
        let mut all = b0.files.clone();
        all.extend(b1.files.clone());
        all.extend(files);
        assert_eq!(
            sorted(ids(&skipping, &all).await),
            (0..30).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn overwrite_is_refused_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append_ids(&path, 0..10, 1).await;
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![100])),
                Arc::new(StringArray::from(vec!["a"])),
            ],
        )
        .unwrap();
        crate::delta::open_table(&path)
            .await
            .unwrap()
            .write(vec![batch])
            .with_save_mode(SaveMode::Overwrite)
            .await
            .unwrap();
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0))
        });
        let b0 = src.plan(None).await.unwrap().unwrap();
        let err = src.plan(Some(&b0.end)).await.unwrap_err().to_string();
        assert!(
            err.contains("rewritten at version 1 (WRITE mode=Overwrite)"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn optimize_is_skipped_silently_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        // Unpartitioned: one small file per commit.
        for v in 0..4i64 {
            let rows: Vec<(i64, &str)> = (v * 5..v * 5 + 5).map(|i| (i, "a")).collect();
            append(&path, &rows, false).await;
        }
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0));
            o.max_files_per_trigger = 3;
        });
        let b0 = src.plan(None).await.unwrap().unwrap();
        let table = crate::delta::open_table(&path).await.unwrap();
        let (table, metrics) = table.optimize().await.unwrap();
        assert!(metrics.num_files_removed >= 2, "{metrics:?}");
        let optimize_version = table.version().unwrap();
        assert_eq!(optimize_version, 4);
        let rows: Vec<(i64, &str)> = (20..25).map(|i| (i, "a")).collect();
        append(&path, &rows, false).await; // 5
        let rest = drain(&mut src, Some(b0.end.clone())).await;
        let mut files = b0.files.clone();
        files.extend(all_files(&rest));
        assert!(files.iter().all(|f| f.version != optimize_version));
        assert_once(&files);
        let got = ids(&src, &files).await;
        assert_eq!(got.len(), 25, "no row twice");
        assert_eq!(sorted(got), (0..25).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn vacuum_commits_are_skipped_and_the_stream_goes_on_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        for v in 0..3i64 {
            let rows: Vec<(i64, &str)> = (v * 5..v * 5 + 5).map(|i| (i, "a")).collect();
            append(&path, &rows, false).await;
        }
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0))
        });
        let read = drain(&mut src, None).await;
        let end = read.last().unwrap().end.clone();
        // OPTIMIZE (dataChange = false), then VACUUM of the files it removed: two more
        // commits without data actions.
        let table = crate::delta::open_table(&path).await.unwrap();
        let (table, _) = table.optimize().await.unwrap();
        let before_vacuum = table.version().unwrap();
        // The files were removed at this millisecond; a retention of zero deletes them after it.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (table, metrics) = table
            .vacuum()
            .with_retention_period(chrono::Duration::zero())
            .with_enforce_retention_duration(false)
            .await
            .unwrap();
        assert_eq!(metrics.files_deleted.len(), 3);
        assert!(table.version().unwrap() > before_vacuum, "VACUUM commits");
        let rows: Vec<(i64, &str)> = (15..20).map(|i| (i, "a")).collect();
        let appended = append(&path, &rows, false).await;
        let rest = drain(&mut src, Some(end)).await;
        let files = all_files(&rest);
        assert!(files.iter().all(|f| f.version == appended), "{files:?}");
        let mut all = all_files(&read);
        all.extend(files.clone());
        assert_once(&all);
        assert_eq!(
            sorted(ids(&src, &files).await),
            (15..20).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn replay_of_a_recorded_range_gives_the_same_files() {
        for starting_version in [
            None,
            Some(StartingVersion::Version(1)),
            Some(StartingVersion::Latest),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t");
            append_ids(&path, 0..20, 3).await; // 0
            append_ids(&path, 20..30, 2).await; // 1
            let mut src = source(&path, |o| {
                o.starting_version = starting_version;
                o.max_files_per_trigger = 3;
            });
            let mut batches = Vec::new();
            let mut from: Option<DeltaOffset> = None;
            for round in 0..4i64 {
                append_ids(&path, 100 + round * 10..110 + round * 10, 3).await;
                while let Some(b) = src.plan(from.as_ref()).await.unwrap() {
                    from = Some(b.end.clone());
                    batches.push(b);
                }
            }
            assert!(batches.len() >= 3);
            // Later commits must not change what a recorded range holds.
            append_ids(&path, 500..510, 2).await;
            let mut replayer = source(&path, |o| {
                o.starting_version = starting_version;
                o.max_files_per_trigger = 3;
            });
            for b in &batches {
                let files = replayer
                    .files_between(b.start.as_ref(), &b.end)
                    .await
                    .unwrap();
                assert_eq!(
                    files, b.files,
                    "{starting_version:?} {:?} -> {:?}",
                    b.start, b.end
                );
                // Planning the same start on the same table ends at the same offset.
                if b.start.is_some() {
                    let again = replayer
                        .plan_with(
                            b.start.as_ref(),
                            PlanBounds {
                                unbounded: false,
                                until_version: Some(b.latest_version),
                            },
                        )
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(again.end, b.end);
                }
            }
        }
    }

    #[tokio::test]
    async fn backlog_counts_versions_files_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        for v in 0..5i64 {
            append_ids(&path, v * 10..v * 10 + 10, 1).await;
        }
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0));
            o.max_bytes_per_trigger = Some(1); // soft: one file per batch
        });
        let batches = drain(&mut src, None).await;
        assert_eq!(batches.len(), 5);
        assert!(batches.iter().all(|b| b.files.len() == 1));
        let sizes: Vec<u64> = batches.iter().map(|b| b.files[0].size).collect();
        // After the first batch (version 0, offset inside it): 4 versions, 4 files behind.
        assert_eq!(
            batches[0].backlog,
            Backlog {
                versions_behind: 4,
                files: 4,
                bytes: sizes[1..].iter().sum(),
            }
        );
        // After the second (version 1 done, offset moved on to version 2): 3 behind.
        assert_eq!(batches[1].end.reservoir_version, 2);
        assert_eq!(
            batches[1].backlog,
            Backlog {
                versions_behind: 3,
                files: 3,
                bytes: sizes[2..].iter().sum(),
            }
        );
        assert_eq!(batches[4].backlog, Backlog::default());
        assert_eq!(batches[4].latest_version, 4);
    }

    #[tokio::test]
    async fn available_now_stops_at_the_version_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        for v in 0..4i64 {
            append_ids(&path, v * 10..v * 10 + 10, 1).await;
        }
        let mut src = source(&path, |o| {
            o.starting_version = Some(StartingVersion::Version(0))
        });
        let bounds = PlanBounds {
            unbounded: false,
            until_version: Some(1),
        };
        let b0 = src.plan_with(None, bounds).await.unwrap().unwrap();
        let b1 = src.plan_with(Some(&b0.end), bounds).await.unwrap().unwrap();
        assert!(
            src.plan_with(Some(&b1.end), bounds)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            b1.files.iter().map(|f| f.version).collect::<Vec<_>>(),
            vec![1]
        );
        // The backlog still counts up to the table's latest version.
        assert_eq!(b1.backlog.files, 2);
        // Unbounded (trigger once) takes everything left at once.
        let all = src
            .plan_with(
                Some(&b0.end),
                PlanBounds {
                    unbounded: true,
                    until_version: None,
                },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(all.files.len(), 3);
    }

    #[tokio::test]
    async fn an_offset_of_another_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append_ids(&path, 0..10, 1).await;
        let mut src = source(&path, |_| {});
        let b0 = src.plan(None).await.unwrap().unwrap();
        let mut foreign = b0.end.clone();
        foreign.reservoir_id = "another-table".into();
        let err = src.plan(Some(&foreign)).await.unwrap_err().to_string();
        assert!(err.contains("deleted and created again"), "{err}");
        let mut ahead = b0.end.clone();
        ahead.reservoir_version = 5;
        ahead.is_starting_version = false;
        let err = src.plan(Some(&ahead)).await.unwrap_err().to_string();
        assert!(err.contains("beyond the table's latest version 0"), "{err}");
    }
}
