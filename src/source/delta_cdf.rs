//! The Delta change data feed as a stream: Spark's `DeltaSource` with `readChangeFeed`
//! (docs/delta-source.md, "Change data feed").
//!
//! The position in the table is the Delta source's [`DeltaOffset`] (Spark's
//! `DeltaSourceOffset`), always at a version boundary: `(V, -1, isStartingVersion =
//! false)` says every version before V has been read. A batch reads whole commits, the
//! versions `[start, end]`, through deltalake's CDF reader (`DeltaTable::scan_cdf`,
//! delta-rs `CdfLoadBuilder`): the commit's change data files (`_change_data/`) where it
//! wrote them, its `add` / `remove` actions with `dataChange = true` read as `insert` /
//! `delete` rows otherwise. weir reads the log itself only to decide the range: how many
//! files each commit brings (the batch bounds), whether the table recorded its changes
//! (`delta.enableChangeDataFeed`) at each version, and schema changes.
//!
//! Determinism: the query's first batch reads one version only (the start), so its end
//! offset `(start + 1, -1)` alone says what it read; every later batch reads
//! `[prev_end.version, end.version - 1]`. A replay after a crash reads exactly that.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, new_null_array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use deltalake::DeltaTable;
use deltalake::kernel::{Action, StructType};

use crate::error::{Error, Result};
use crate::source::delta::{BASE_INDEX, DeltaOffset, PlanBounds, SOURCE_VERSION};
use crate::spec::{DeltaSourceOptions, StartingVersion};

/// Delta's change type column: `insert`, `update_preimage`, `update_postimage`, `delete`.
pub const CHANGE_TYPE: &str = "_change_type";
/// The version of the commit that made the change (BIGINT).
pub const COMMIT_VERSION: &str = "_commit_version";
/// The commit's timestamp (TIMESTAMP, UTC, microseconds as Spark's).
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";

/// The versions a batch of the change feed reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CdfRange {
    /// First version read.
    pub start: u64,
    /// Last version read (inclusive).
    pub end: u64,
    /// Data and change files of the range (`add`, `remove` with `dataChange`, `cdc`).
    pub files: u64,
    pub bytes: u64,
}

impl CdfRange {
    /// Versions in the range.
    pub fn versions(&self) -> u64 {
        self.end + 1 - self.start
    }
}

/// One planned batch of the change feed.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCdfBatch {
    pub range: CdfRange,
    /// The end offset to record: `(range.end + 1, -1, false)`.
    pub end: DeltaOffset,
    /// Versions after the range up to the latest.
    pub versions_behind: u64,
}

/// What one commit means for the feed.
#[derive(Debug, Clone, Default)]
struct CommitFacts {
    files: u64,
    bytes: u64,
    /// `delta.enableChangeDataFeed` as the commit's `metaData` sets it (`None`: no metaData).
    cdf: Option<bool>,
    /// The schema the commit's `metaData` sets.
    schema: Option<StructType>,
}

pub struct CdfSource {
    options: DeltaSourceOptions,
    table: Option<DeltaTable>,
    id: String,
    latest: u64,
    /// The table's schema when first loaded (the run's read schema, before the CDF columns).
    table_schema: Option<StructType>,
    /// The version `table_schema` was taken at: a later commit setting another schema
    /// stops the stream before it (the next run reads with the new schema).
    schema_version: u64,
    schema: Option<SchemaRef>,
    /// `delta.enableChangeDataFeed` as known at a version (saves loading that version again).
    cdf_at: Option<(u64, bool)>,
    /// The only columns the flow reads (projection pushdown); `None`: every column.
    read_columns: Option<Vec<String>>,
}

impl CdfSource {
    pub fn new(options: DeltaSourceOptions) -> Self {
        CdfSource {
            options,
            table: None,
            id: String::new(),
            latest: 0,
            table_schema: None,
            schema_version: 0,
            schema: None,
            cdf_at: None,
            read_columns: None,
        }
    }

    fn path_text(&self) -> String {
        self.options.path.display().to_string()
    }

    fn err(&self, source: deltalake::DeltaTableError) -> Error {
        Error::Delta {
            path: self.path_text(),
            source,
        }
    }

    fn source_error(&self, message: String) -> Error {
        Error::Source {
            path: self.options.path.clone(),
            message,
        }
    }

    fn table(&self) -> Result<&DeltaTable> {
        self.table
            .as_ref()
            .ok_or_else(|| self.source_error("the Delta table is not loaded".into()))
    }

    /// The rows' schema: the table's columns (nullable), then `_change_type` STRING,
    /// `_commit_version` BIGINT, `_commit_timestamp` TIMESTAMP (Delta's CDF columns).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// Reads only `columns` from now on (projection pushdown, as the Delta source's
    /// `read_only`); the schema and planning are unchanged, the batches narrower.
    pub fn read_only(&mut self, columns: Option<Vec<String>>) {
        self.read_columns = columns;
    }

    /// Loads the table's latest version; `None` while no table exists at the path.
    pub async fn refresh(&mut self) -> Result<Option<u64>> {
        match self.table.as_mut() {
            Some(table) => {
                let res = table.update_incremental(None).await;
                res.map_err(|e| Error::Delta {
                    path: self.options.path.display().to_string(),
                    source: e,
                })?;
            }
            None => match crate::delta::open_existing(&self.options.path).await? {
                Some(table) => self.table = Some(table),
                None => return Ok(None),
            },
        }
        let table = self.table()?.clone();
        let state = table.snapshot().map_err(|e| self.err(e))?;
        let metadata = state.metadata();
        if let Some(mode) = crate::delta::column_mapping_mode(metadata.configuration()) {
            return Err(self.source_error(format!(
                "the table uses column mapping (delta.columnMapping.mode = {mode}), whose change data feed deltalake does not read yet"
            )));
        }
        let id = metadata.id().to_string();
        let latest = state.version();
        if self.schema.is_some() && id != self.id {
            return Err(self.source_error(format!(
                "the table was replaced (its id is now {id}, was {}); start the flow with a new checkpoint",
                self.id
            )));
        }
        if self.schema.is_none() {
            let arrow_schema = state.snapshot().arrow_schema();
            let mut fields: Vec<Arc<Field>> = arrow_schema
                .fields()
                .iter()
                .map(|f| Arc::new(Field::clone(f).with_nullable(true)))
                .collect();
            fields.extend(cdf_fields().into_iter().map(Arc::new));
            self.schema = Some(Arc::new(Schema::new(fields)));
            self.table_schema = Some(state.schema().as_ref().clone());
            self.schema_version = latest;
            self.id = id;
        }
        self.latest = latest;
        Ok(Some(latest))
    }

    /// The version a query without an offset starts at: `starting_version`, or the first
    /// version committed at or after `starting_timestamp` (Delta's `startingTimestamp`).
    async fn start_version(&self) -> Result<u64> {
        if let Some(StartingVersion::Version(v)) = self.options.starting_version {
            return Ok(v);
        }
        let Some(ts) = self.options.starting_timestamp_ms else {
            return Err(self.source_error(
                "read_change_feed needs starting_version or starting_timestamp (where the feed starts)".into(),
            ));
        };
        let log_store = self.table()?.log_store();
        let mut last = None;
        for v in 0..=self.latest {
            let Some(bytes) = log_store
                .read_commit_entry(v as _)
                .await
                .map_err(|e| self.err(e))?
            else {
                continue;
            };
            let actions =
                deltalake::logstore::get_actions(v as _, &bytes).map_err(|e| self.err(e))?;
            let committed = actions.iter().find_map(|a| match a {
                Action::CommitInfo(i) => i.in_commit_timestamp.or(i.timestamp),
                _ => None,
            });
            if let Some(t) = committed {
                if t >= ts {
                    return Ok(v);
                }
                last = Some(t);
            }
        }
        Err(self.source_error(format!(
            "starting_timestamp {} is after the table's latest commit (version {}{}); no version to start from",
            format_ms(ts),
            self.latest,
            last.map(|t| format!(", committed at {}", format_ms(t))).unwrap_or_default()
        )))
    }

    /// Commit `v`'s files and `metaData`.
    async fn commit_facts(&self, v: u64) -> Result<CommitFacts> {
        let log_store = self.table()?.log_store();
        let Some(bytes) = log_store
            .read_commit_entry(v as _)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Err(self.source_error(format!(
                "commit {v} is no longer in the Delta log (removed by log retention?); its changes cannot be read. \
                 Start the flow with a new checkpoint and a later starting_version"
            )));
        };
        let actions = deltalake::logstore::get_actions(v as _, &bytes).map_err(|e| self.err(e))?;
        let mut facts = CommitFacts::default();
        for action in actions {
            match action {
                Action::Add(a) if a.data_change => {
                    facts.files += 1;
                    facts.bytes += a.size.max(0) as u64;
                }
                Action::Remove(r) if r.data_change => {
                    facts.files += 1;
                    facts.bytes += r.size.unwrap_or(0).max(0) as u64;
                }
                Action::Cdc(c) => {
                    facts.files += 1;
                    facts.bytes += c.size.max(0) as u64;
                }
                Action::Metadata(m) => {
                    facts.cdf = Some(
                        m.configuration()
                            .get("delta.enableChangeDataFeed")
                            .is_some_and(|s| s.eq_ignore_ascii_case("true")),
                    );
                    facts.schema = Some(m.parse_schema().map_err(|e| {
                        self.source_error(format!(
                            "the schema in the metaData action of version {v} is unreadable: {e}"
                        ))
                    })?);
                }
                _ => {}
            }
        }
        Ok(facts)
    }

    /// Whether the table records its changes at version `v` before commit `v`'s own
    /// `metaData` (the configuration of version `v - 1`), `None` for version 0.
    async fn cdf_before(&mut self, v: u64) -> Result<Option<bool>> {
        if v == 0 {
            return Ok(None);
        }
        let before = v - 1;
        if let Some((at, enabled)) = self.cdf_at
            && at == before
        {
            return Ok(Some(enabled));
        }
        let table = self.table()?;
        let state = deltalake::table::state::DeltaTableState::try_new(
            table.log_store().as_ref(),
            Some(before as _),
        )
        .await
        .map_err(|e| self.err(e))?;
        let enabled = state
            .metadata()
            .configuration()
            .get("delta.enableChangeDataFeed")
            .is_some_and(|s| s.eq_ignore_ascii_case("true"));
        self.cdf_at = Some((before, enabled));
        Ok(Some(enabled))
    }

    fn not_recorded(&self, v: u64) -> Error {
        self.source_error(format!(
            "the table has no change data feed at version {v}: delta.enableChangeDataFeed was not \"true\" when it was \
             committed, so its changes were not recorded (Delta records them only from the commit that sets the \
             property on). Set the property (a weir sink's table_properties = {{ \"delta.enableChangeDataFeed\" = \"true\" }} \
             when it creates the table, or ALTER TABLE ... SET TBLPROPERTIES), and start the flow with a new checkpoint \
             and a starting_version after {v}"
        ))
    }

    /// Plans the next batch after `from` (`None`: the query's first batch). `None` when
    /// there is no new version (or no table yet).
    pub async fn plan(
        &mut self,
        from: Option<&DeltaOffset>,
        bounds: PlanBounds,
    ) -> Result<Option<PlannedCdfBatch>> {
        let Some(latest) = self.refresh().await? else {
            if from.is_some() {
                return Err(self.source_error(
                    "the Delta table is gone: the checkpoint has an offset in it, there is no table at the path any more"
                        .into(),
                ));
            }
            return Ok(None);
        };
        let horizon = bounds.until_version.map_or(latest, |u| u.min(latest));
        let first = from.is_none();
        let start = match from {
            Some(offset) => self.check_offset(offset)?,
            None => self.start_version().await?,
        };
        if start > horizon {
            return Ok(None);
        }
        let last_allowed = if first { start } else { horizon };
        let mut enabled = self.cdf_before(start).await?;
        let mut range = CdfRange {
            start,
            end: start,
            files: 0,
            bytes: 0,
        };
        for v in start..=last_allowed {
            let facts = self.commit_facts(v).await?;
            if let Some(cdf) = facts.cdf {
                enabled = Some(cdf);
            }
            if enabled != Some(true) {
                if v == start {
                    return Err(self.not_recorded(v));
                }
                // The versions before it are delivered first; the next plan refuses it.
                break;
            }
            if let (Some(new), Some(old)) = (&facts.schema, &self.table_schema)
                && new != old
                && v > self.schema_version
            {
                if v == start {
                    return Err(self.source_error(format!(
                        "the table's schema changed at version {v}; restart the flow to read its change feed with the new schema"
                    )));
                }
                break;
            }
            let over = !bounds.unbounded
                && v > start
                && (range.files + facts.files > self.options.max_files_per_trigger
                    || self
                        .options
                        .max_bytes_per_trigger
                        .is_some_and(|b| range.bytes + facts.bytes > b));
            if over {
                break;
            }
            range.end = v;
            range.files += facts.files;
            range.bytes += facts.bytes;
            self.cdf_at = Some((v, enabled == Some(true)));
        }
        Ok(Some(PlannedCdfBatch {
            range,
            end: self.offset(range.end + 1),
            versions_behind: latest.saturating_sub(range.end),
        }))
    }

    fn offset(&self, version: u64) -> DeltaOffset {
        DeltaOffset {
            source_version: SOURCE_VERSION,
            reservoir_id: self.id.clone(),
            reservoir_version: version,
            index: BASE_INDEX,
            is_starting_version: false,
        }
    }

    /// The version an offset of this source resumes at.
    fn check_offset(&self, offset: &DeltaOffset) -> Result<u64> {
        if offset.source_version != SOURCE_VERSION {
            return Err(self.source_error(format!(
                "unsupported Delta source offset version {} (weir reads version {SOURCE_VERSION})",
                offset.source_version
            )));
        }
        if offset.reservoir_id != self.id {
            return Err(self.source_error(format!(
                "the checkpoint's offset belongs to table {}, the table at the path is {}: it was deleted and \
                 created again. Start the flow with a new checkpoint",
                offset.reservoir_id, self.id
            )));
        }
        if offset.is_starting_version || offset.index != BASE_INDEX {
            return Err(self.source_error(format!(
                "the checkpoint's offset (version {}, index {}{}) was not written by a change data feed read: \
                 read_change_feed was turned on for a flow that read the table's files. Start the flow with a new checkpoint",
                offset.reservoir_version,
                offset.index,
                if offset.is_starting_version { ", in the initial snapshot" } else { "" }
            )));
        }
        Ok(offset.reservoir_version)
    }

    /// The range of a recorded batch: `(prev_end, end]` as [`CdfSource::plan`] planned it.
    pub async fn range_between(
        &mut self,
        start: Option<&DeltaOffset>,
        end: &DeltaOffset,
    ) -> Result<Option<CdfRange>> {
        if self.schema.is_none() {
            self.refresh().await?;
        }
        let last = self.check_offset(end)?.checked_sub(1);
        let first = match start {
            Some(s) => self.check_offset(s)?,
            None => last.unwrap_or(0),
        };
        match last {
            Some(last) if last >= first => Ok(Some(CdfRange {
                start: first,
                end: last,
                files: 0,
                bytes: 0,
            })),
            _ => Ok(None),
        }
    }

    /// Reads the change rows of the versions `[range.start, range.end]` with deltalake's
    /// CDF reader, in the run's schema.
    pub async fn read(&self, range: &CdfRange) -> Result<Vec<RecordBatch>> {
        let schema = self
            .schema
            .clone()
            .ok_or_else(|| self.source_error("the Delta table is not loaded".into()))?;
        let schema = match &self.read_columns {
            None => schema,
            Some(columns) => Arc::new(Schema::new(
                schema
                    .fields()
                    .iter()
                    .filter(|f| columns.contains(f.name()))
                    .cloned()
                    .collect::<Vec<_>>(),
            )),
        };
        let table = self.table()?.clone();
        let ctx = datafusion::prelude::SessionContext::new();
        let plan = table
            .scan_cdf()
            .with_starting_version(range.start as _)
            .with_ending_version(range.end as _)
            .build(&ctx.state(), None)
            .await
            .map_err(|e| self.read_error(range, e))?;
        let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
            .await
            .map_err(|e| self.read_error(range, e.into()))?;
        batches
            .iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| conform(b, &schema).map_err(|m| self.source_error(m)))
            .collect()
    }

    fn read_error(&self, range: &CdfRange, e: deltalake::DeltaTableError) -> Error {
        match e {
            deltalake::DeltaTableError::ChangeDataNotEnabled { version }
            | deltalake::DeltaTableError::ChangeDataNotRecorded { version, .. } => {
                self.not_recorded(version)
            }
            other => self.source_error(format!(
                "reading the change data feed of versions {}..={}: {other}",
                range.start, range.end
            )),
        }
    }
}

/// Delta's CDF columns as weir reads them (Spark's types).
pub fn cdf_fields() -> Vec<Field> {
    vec![
        Field::new(CHANGE_TYPE, DataType::Utf8, true),
        Field::new(COMMIT_VERSION, DataType::Int64, true),
        Field::new(
            COMMIT_TIMESTAMP,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
    ]
}

/// A batch of deltalake's CDF reader in `schema`: columns by name, cast (deltalake's
/// `_commit_version` is UInt64, `_commit_timestamp` milliseconds without a zone), missing
/// columns as nulls.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> std::result::Result<RecordBatch, String> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| -> std::result::Result<ArrayRef, String> {
            let Some(column) = batch.column_by_name(field.name()) else {
                return Ok(new_null_array(field.data_type(), batch.num_rows()));
            };
            if column.data_type() == field.data_type() {
                return Ok(column.clone());
            }
            let column = match (column.data_type(), field.data_type()) {
                // A zone-less timestamp of the CDF reader is UTC: say so before casting.
                (DataType::Timestamp(unit, None), DataType::Timestamp(_, Some(_))) => {
                    cast(column, &DataType::Timestamp(*unit, Some("UTC".into())))
                        .map_err(|e| format!("column {}: {e}", field.name()))?
                }
                _ => column.clone(),
            };
            cast(&column, field.data_type()).map_err(|e| {
                format!(
                    "column {} of the change feed ({}) does not cast to {}: {e}",
                    field.name(),
                    column.data_type(),
                    field.data_type()
                )
            })
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
}

fn format_ms(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.to_rfc3339())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_columns_have_sparks_types() {
        let fields = cdf_fields();
        assert_eq!(fields[0].name(), "_change_type");
        assert_eq!(fields[1].data_type(), &DataType::Int64);
        assert_eq!(
            fields[2].data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
    }

    #[test]
    fn conform_casts_the_readers_columns() {
        use arrow::array::{StringArray, TimestampMillisecondArray, UInt64Array};
        let schema = Arc::new(Schema::new(
            std::iter::once(Field::new("id", DataType::Utf8, true))
                .chain(cdf_fields())
                .collect::<Vec<_>>(),
        ));
        let raw = RecordBatch::try_from_iter(vec![
            (
                "_change_type",
                Arc::new(StringArray::from(vec!["insert"])) as ArrayRef,
            ),
            (
                "_commit_version",
                Arc::new(UInt64Array::from(vec![3u64])) as ArrayRef,
            ),
            (
                "_commit_timestamp",
                Arc::new(TimestampMillisecondArray::from(vec![1_700_000_000_000i64])) as ArrayRef,
            ),
        ])
        .unwrap();
        let out = conform(&raw, &schema).unwrap();
        assert_eq!(out.schema(), schema);
        assert!(out.column(0).is_null(0));
        let ts = out
            .column(3)
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_700_000_000_000_000);
    }

    /// Appends ids `ids` in one commit (one file); with `cdf`, the first append creates
    /// the table with `delta.enableChangeDataFeed = true`.
    async fn append(path: &std::path::Path, ids: std::ops::Range<i64>, cdf: bool) -> u64 {
        let batch = RecordBatch::try_from_iter(vec![(
            "id",
            Arc::new(arrow::array::Int64Array::from_iter_values(ids)) as ArrayRef,
        )])
        .unwrap();
        let table = crate::delta::open_table(path).await.unwrap();
        let mut write = table
            .write(vec![batch])
            .with_save_mode(deltalake::protocol::SaveMode::Append);
        if cdf {
            write = write.with_configuration([(
                "delta.enableChangeDataFeed".to_string(),
                Some("true".to_string()),
            )]);
        }
        write.await.unwrap().version().unwrap()
    }

    fn source(path: &std::path::Path, max_files: u64) -> CdfSource {
        let mut options = DeltaSourceOptions::new(path);
        options.read_change_feed = true;
        options.starting_version = Some(StartingVersion::Version(0));
        options.max_files_per_trigger = max_files;
        CdfSource::new(options)
    }

    #[tokio::test]
    async fn batches_take_whole_versions_within_the_file_bound_and_replay_the_same_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, 0..2, true).await;
        for i in 1..5 {
            append(&path, i * 10..i * 10 + 3, false).await;
        }
        let mut src = source(&path, 2);
        let bounds = PlanBounds::default();
        // The first batch reads its start version alone.
        let first = src.plan(None, bounds).await.unwrap().unwrap();
        assert_eq!((first.range.start, first.range.end), (0, 0));
        assert_eq!(first.end.reservoir_version, 1);
        assert_eq!(first.end.index, BASE_INDEX);
        assert_eq!(first.versions_behind, 4);
        // Then two versions (one file each) per batch.
        let second = src.plan(Some(&first.end), bounds).await.unwrap().unwrap();
        assert_eq!((second.range.start, second.range.end), (1, 2));
        let third = src.plan(Some(&second.end), bounds).await.unwrap().unwrap();
        assert_eq!((third.range.start, third.range.end), (3, 4));
        assert!(src.plan(Some(&third.end), bounds).await.unwrap().is_none());
        // A replay re-derives each range from its offsets alone.
        let mut fresh = source(&path, 2);
        assert_eq!(
            fresh
                .range_between(None, &first.end)
                .await
                .unwrap()
                .map(|r| (r.start, r.end)),
            Some((0, 0))
        );
        assert_eq!(
            fresh
                .range_between(Some(&second.end), &third.end)
                .await
                .unwrap()
                .map(|r| (r.start, r.end)),
            Some((3, 4))
        );
        let rows: usize = fresh
            .read(&third.range)
            .await
            .unwrap()
            .iter()
            .map(RecordBatch::num_rows)
            .sum();
        assert_eq!(rows, 6);
    }

    #[tokio::test]
    async fn versions_before_the_feed_was_turned_off_are_delivered_then_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, 0..2, true).await;
        append(&path, 2..4, false).await;
        let table = crate::delta::open_table(&path).await.unwrap();
        table
            .set_tbl_properties()
            .with_properties(
                [(
                    "delta.enableChangeDataFeed".to_string(),
                    "false".to_string(),
                )]
                .into(),
            )
            .await
            .unwrap();
        append(&path, 4..6, false).await;
        let mut src = source(&path, 100);
        let bounds = PlanBounds::default();
        let first = src.plan(None, bounds).await.unwrap().unwrap();
        let second = src.plan(Some(&first.end), bounds).await.unwrap().unwrap();
        assert_eq!((second.range.start, second.range.end), (1, 1));
        let refused = src.plan(Some(&second.end), bounds).await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("no change data feed at version 2"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn a_table_without_the_feed_is_refused_at_the_start_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        append(&path, 0..2, false).await;
        append(&path, 2..4, false).await;
        let mut src = source(&path, 100);
        let refused = src.plan(None, PlanBounds::default()).await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("no change data feed at version 0"),
            "{refused}"
        );
    }
}
