//! What a flow declares: the spec layer, at the bottom of the crate.
//!
//! Every type a pipeline's flows are made of, resolved (absolute paths, parsed
//! durations and sizes): the flow, its source (files or a Delta table), sink,
//! trigger, watermark and stateful query, stream-static and stream-stream joins,
//! health thresholds, alert rules, the units they are written in, and [`PipelineError`], the
//! error of an invalid pipeline file. This module imports nothing else of weir;
//! `crate::pipeline` reads and checks the TOML into these types, and every other
//! module takes them from here.

pub mod alerts;
mod error;
mod expect;
mod health;
mod join;
mod sink;
mod source;
mod stateful;
pub mod time;
pub mod units;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use alerts::{AlertCondition, AlertRule, AlertTarget, AlertsSpec};
pub use error::PipelineError;
pub use expect::{ExpectationSpec, KeyAt, OnViolation};
pub use health::HealthConfig;
pub use join::{DimensionFormat, JoinOn, JoinSpec, JoinType, StreamJoinSpec, TimeRange};
pub use sink::{ColumnMappingMode, SinkSpec};
pub use source::{
    CsvOptions, DEFAULT_BACKFILL_INTERVAL, DEFAULT_DELTA_MAX_FILES_PER_TRIGGER,
    DEFAULT_INFERENCE_MAX_BYTES, DEFAULT_KAFKA_MAX_TRIGGER_DELAY, DEFAULT_MAX_FILES_PER_TRIGGER,
    DeltaSourceOptions, EvolutionMode, FileFormat, FilesSource, FollowSymlinks, IncrementalListing,
    KafkaSourceSpec, KafkaSubscribe, KafkaValueFormat, ParseMode, SourceSpec, StartingVersion,
    TextEncoding, TextOptions,
};
pub use stateful::{OutputMode, StatefulSpec, WatermarkPolicy, WatermarkSpec};
pub use time::{TimestampFormat, TimestampOptions};
pub use units::{ByteSize, HumanDuration};

/// A checked pipeline with absolute paths.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub path: PathBuf,
    pub flows: Vec<FlowSpec>,
    /// `[alerts]`: rules notifying a command or a URL (docs/operate.md).
    pub alerts: AlertsSpec,
}

impl Pipeline {
    pub fn flow(&self, name: &str) -> Option<&FlowSpec> {
        self.flows.iter().find(|f| f.name == name)
    }
}

/// When a flow runs its micro-batches (Spark's `Trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Start a batch every interval; zero = as soon as the previous one ends. Polls when idle.
    ProcessingTime(Duration),
    /// Process everything present at start in bounded batches, then stop.
    AvailableNow,
    /// One batch with everything present (up to the limits), then stop.
    Once,
}

impl Trigger {
    /// Parses the CLI/TOML words: `available_now` / `available-now`, `once`, or a duration.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "available_now" | "available-now" | "availableNow" => Ok(Trigger::AvailableNow),
            "once" => Ok(Trigger::Once),
            other => HumanDuration::parse(other)
                .map(|d| Trigger::ProcessingTime(d.0))
                .map_err(|_| {
                    format!(
                        "invalid trigger {text:?}; allowed: \"available_now\", \"once\", or a processing-time interval such as \"10 seconds\""
                    )
                }),
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::ProcessingTime(d) => {
                write!(f, "processing_time({})", humantime::format_duration(*d))
            }
            Trigger::AvailableNow => f.write_str("available_now"),
            Trigger::Once => f.write_str("once"),
        }
    }
}

/// One streaming query, resolved.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    pub name: String,
    pub source: SourceSpec,
    /// Data-quality constraints on the input rows, before `where`/`select`
    /// (`[[flow.expect]]`, docs/expectations.md).
    pub expectations: Vec<ExpectationSpec>,
    /// The Delta table the rows `drop` expectations remove go to, with the names of the
    /// expectations each failed (`quarantine_path`).
    pub quarantine_path: Option<PathBuf>,
    pub where_: Option<String>,
    pub select: Option<Vec<String>>,
    pub sink: SinkSpec,
    pub trigger: Trigger,
    pub checkpoint: PathBuf,
    /// Watermark, aggregation, deduplication and output mode (DESIGN.md §6).
    pub stateful: StatefulSpec,
    /// Delta table receiving rows behind the watermark (instead of dropping them).
    pub late_rows: Option<PathBuf>,
    /// Health thresholds (`freshness`, `[flow.health]`) and retry budget.
    pub health: HealthConfig,
    /// Stream-static joins (docs/joins.md).
    pub joins: Vec<JoinSpec>,
    /// A stream-stream join with a second stream (docs/stream-joins.md).
    pub stream_join: Option<StreamJoinSpec>,
    /// More sources whose rows join the flow's source's, by column name (`[[flow.union]]`,
    /// Spark's `unionByName`).
    pub union: Vec<UnionSpec>,
    /// How the sources' watermarks make the flow's (with `union`).
    pub multiple_watermark_policy: WatermarkPolicy,
    /// Batches whose `offsets/`, `commits/` and state versions the checkpoint keeps (Spark's
    /// `spark.sql.streaming.minBatchesToRetain`; at least 1, default
    /// [`DEFAULT_MIN_BATCHES_TO_RETAIN`]).
    pub min_batches_to_retain: u64,
    /// The Delta sink's `optimize_every`: the engine compacts the table's small files
    /// (Delta OPTIMIZE) between batches when this long has passed since the last time.
    pub optimize_every: Option<Duration>,
}

/// Spark's default `spark.sql.streaming.minBatchesToRetain`.
pub const DEFAULT_MIN_BATCHES_TO_RETAIN: u64 = 100;

/// One `[[flow.union]]`: a source and its own watermark.
#[derive(Debug, Clone)]
pub struct UnionSpec {
    pub source: SourceSpec,
    /// This source's watermark (the flow's `watermark` is its source's; by default a
    /// union source takes the same column and delay, tracked on its own rows).
    pub watermark: Option<WatermarkSpec>,
}

impl FlowSpec {
    /// The flow's sources in Spark's order (source `i` owns offset `i` of `offsets/N` and
    /// `sources/<i>/` in the checkpoint): its `source`, then the `[[flow.union]]` sources
    /// in file order, or a stream-stream join's right side.
    pub fn sources(&self) -> Vec<&SourceSpec> {
        std::iter::once(&self.source)
            .chain(self.union.iter().map(|u| &u.source))
            .chain(self.stream_join.as_ref().map(|j| &j.source))
            .collect()
    }

    /// The watermark of source `i` of a union (`None` for a flow without one).
    pub fn source_watermark(&self, i: usize) -> Option<&WatermarkSpec> {
        match i {
            0 => self.stateful.watermark.as_ref(),
            i => self
                .union
                .get(i - 1)
                .and_then(|u| u.watermark.as_ref())
                .or(self.stateful.watermark.as_ref()),
        }
    }

    /// Whether the flow reads several sources as one stream (`[[flow.union]]`).
    pub fn is_union(&self) -> bool {
        !self.union.is_empty()
    }

    /// The tables this flow reads as a stream or a dimension (for dependency order).
    pub fn reads(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let SourceSpec::Delta(d) = &self.source {
            out.push(normalize(&d.path));
        }
        for j in &self.joins {
            if j.format == DimensionFormat::Delta {
                out.push(normalize(&j.table));
            }
        }
        for source in self.sources().into_iter().skip(1) {
            if let SourceSpec::Delta(d) = source {
                out.push(normalize(&d.path));
            }
        }
        out
    }

    /// Every Delta table this flow writes, with the key that names it: the sink
    /// (`sink.path`), `late_rows`, `quarantine_path`, and each source's `bad_records_table`. Each is written
    /// with its own application transaction id ([`FlowSpec::side_app_id`]).
    pub fn tables_written(&self) -> Vec<(&'static str, PathBuf)> {
        let mut out = Vec::new();
        if let Some(sink) = self.writes() {
            out.push(("sink.path", sink));
        }
        if let Some(late) = &self.late_rows {
            out.push(("late_rows", normalize(late)));
        }
        if let Some(q) = &self.quarantine_path {
            out.push(("quarantine_path", normalize(q)));
        }
        for source in self.sources() {
            if let (_, Some(table)) = source.quarantine() {
                out.push(("bad_records_table", normalize(table)));
            }
        }
        out
    }

    /// Whether the sink only appends rows (a Delta sink in output mode append): two
    /// flows may share such a table; a MERGE or a complete-mode overwrite may not.
    pub fn sink_appends_only(&self) -> bool {
        matches!(self.sink, SinkSpec::Delta { .. })
            && self.stateful.output_mode == OutputMode::Append
    }

    /// The table this flow writes, if it is a Delta table.
    pub fn writes(&self) -> Option<PathBuf> {
        match &self.sink {
            SinkSpec::Delta { path, .. } | SinkSpec::DeltaMerge { path, .. } => {
                Some(normalize(path))
            }
            _ => None,
        }
    }
}

/// `a/./b/../c` → `a/c`, lexically (paths in a pipeline may name tables not created yet).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The flows in dependency order: a flow that reads a table comes after the flow that
/// writes it; otherwise file order is kept. `Err` names a cycle.
pub fn dependency_order(flows: &[FlowSpec]) -> Result<Vec<FlowSpec>, String> {
    let upstream: Vec<Vec<usize>> = flows
        .iter()
        .map(|f| {
            let reads = f.reads();
            flows
                .iter()
                .enumerate()
                .filter(|(_, g)| g.name != f.name && g.writes().is_some_and(|w| reads.contains(&w)))
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let mut done = vec![false; flows.len()];
    let mut order = Vec::with_capacity(flows.len());
    while order.len() < flows.len() {
        let next = (0..flows.len()).find(|&i| !done[i] && upstream[i].iter().all(|&u| done[u]));
        match next {
            Some(i) => {
                done[i] = true;
                order.push(flows[i].clone());
            }
            None => {
                let stuck: Vec<&str> = (0..flows.len())
                    .filter(|&i| !done[i])
                    .map(|i| flows[i].name.as_str())
                    .collect();
                return Err(format!(
                    "flows {} read each other's tables in a cycle; a pipeline's flows must form a chain or a tree (bronze -> silver -> gold)",
                    stuck.join(", ")
                ));
            }
        }
    }
    Ok(order)
}
