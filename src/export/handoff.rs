//! `weir export pyspark --handoff`: a stateless flow's progress, moved to Spark.
//!
//! weir's checkpoint already has Spark's `metadata`, `offsets/N` and `commits/N`; what
//! Spark lacks is the file source's log (`sources/0/N`: the files of batch N, which weir
//! keeps in its ledger). [`write`] builds the Spark checkpoint the exported script uses
//! (`<checkpoint>.spark`, see [`super::spark_checkpoint`]):
//!
//! ```text
//! <checkpoint>.spark/
//!   metadata          {"id":"<weir's query id>"}       same id: the Delta sink's txn(appId) goes on
//!   offsets/<N>       v1, batch metadata (Spark's conf), {"logOffset":N} | weir's DeltaSourceOffset
//!   commits/<N>       v1, {"nextBatchWatermarkMs":..}   for each batch weir committed
//!   sources/0/<N>     v1, one FileEntry per file {"path":"file:///..","timestamp":mtime,"batchId":N}
//!   sources/0/<N>.compact   every 10th batch ((N+1) % 10 == 0): the entries of batches 0..=N
//! ```
//!
//! A batch weir planned but did not commit (a crash mid-batch) is handed over as planned,
//! without its commit, so Spark re-runs it with the same files or Delta range; the Delta
//! sink then skips it if weir's commit of it landed (same app id, same version). Spark
//! resumes at the next batch id and lists the source again: every file weir ingested is in
//! the log, so it is never read twice.
//!
//! A stateful flow (aggregation, deduplication, stream-stream join) is refused: its state
//! is weir's (Arrow IPC), Spark's state store holds UnsafeRows per shuffle partition, and
//! a state that cannot move must be rebuilt. [`refusal`] says so and gives the two safe
//! paths with their dry-runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::checkpoint::lock::CheckpointLock;
use crate::checkpoint::{Checkpoint, CommitMetadata, OffsetSeq};
use crate::error::{Error, Result};
use crate::source::files::ledger::Ledger;
use crate::spec::{FlowSpec, SinkSpec, SourceSpec};

/// Spark's file-source log compaction interval (`spark.sql.streaming.fileSource.log.compactInterval`).
pub const COMPACT_INTERVAL: u64 = 10;

/// The SQL confs Spark 4.2 pins in `offsets/N` (values: its defaults), so the checkpoint
/// reads like one Spark wrote.
const SPARK_CONF: &[(&str, &str)] = &[
    (
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    ),
    (
        "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion",
        "2",
    ),
    ("spark.sql.streaming.stateStore.rocksdb.formatVersion", "5"),
    (
        "spark.sql.streaming.queryEvolution.enableSourceEvolution",
        "false",
    ),
    ("spark.sql.streaming.stateStore.encodingFormat", "unsaferow"),
    (
        "spark.sql.streaming.statefulOperator.useStrictDistribution",
        "true",
    ),
    (
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
        "2",
    ),
    ("spark.sql.streaming.multipleWatermarkPolicy", "min"),
    ("spark.sql.streaming.aggregation.stateFormatVersion", "2"),
    ("spark.sql.shuffle.partitions", "200"),
    ("spark.sql.streaming.join.stateFormatVersion", "2"),
    ("spark.sql.streaming.stateStore.compression.codec", "lz4"),
];

fn create_dir_private(dir: &Path) -> Result<()> {
    crate::durable::create_dir_private(dir).map_err(|e| Error::io(dir, e))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::durable::write_atomic(path, bytes).map_err(|e| Error::io(path, e))
}

/// What was handed over for one flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOver {
    pub flow: String,
    /// The Spark checkpoint written.
    pub checkpoint: PathBuf,
    /// Batches written to `offsets/` (0..=last planned).
    pub batches: u64,
    /// The last batch weir committed, if any.
    pub last_committed: Option<u64>,
    /// A batch planned but not committed: Spark re-runs it first.
    pub pending: Option<u64>,
    /// Files in the file-source log.
    pub files: u64,
}

impl HandedOver {
    pub fn describe(&self) -> String {
        let mut s = format!(
            "flow {}: Spark checkpoint {} ({} batch(es), {} file(s) in sources/0",
            self.flow,
            self.checkpoint.display(),
            self.batches,
            self.files
        );
        match (self.last_committed, self.pending) {
            (_, Some(p)) => {
                let _ = write!(
                    s,
                    "); Spark re-runs batch {p} (planned by weir, not committed), then goes on"
                );
            }
            (Some(c), None) => {
                let _ = write!(s, "); Spark goes on at batch {}", c + 1);
            }
            (None, None) => s.push_str("); nothing was committed yet"),
        }
        s
    }
}

/// Why a flow's progress cannot be handed over, if it cannot.
pub fn stateful_reason(flow: &FlowSpec) -> Option<String> {
    let st = &flow.stateful;
    if flow.stream_join.is_some() {
        Some("its stream-stream join buffers rows of both sides in state".into())
    } else if flow.is_union() {
        Some(
            "it reads several sources ([[flow.union]]), whose offsets are not handed over yet"
                .into(),
        )
    } else if st.has_aggregation() {
        Some("its aggregation keeps open groups in state".into())
    } else if st.has_deduplication() {
        Some("its deduplication keeps the keys it has seen in state".into())
    } else {
        None
    }
}

/// The refusal for a stateful flow: why state cannot move, and the two safe paths with
/// their dry-runs.
pub async fn refusal(pipeline: &Path, flow: &FlowSpec, reason: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "flow {:?}: cannot hand over: {reason}. weir's state (Arrow IPC under {}/state) and Spark's \
         state store (UnsafeRow per shuffle partition) have nothing in common, so the state cannot move; \
         Spark must rebuild it. Two safe paths:",
        flow.name,
        flow.checkpoint.display()
    );
    let _ = writeln!(s);
    let target = crate::checkpoint::compat::sink_table(flow);
    let _ = writeln!(
        s,
        "1. Rebuild from the source with a deliberate reset: empty the target and let Spark recompute \
         the flow from {} (its whole history), with a new Spark checkpoint:",
        flow.source.path().display()
    );
    let _ = writeln!(
        s,
        "     weir checkpoint reset {} --flow {} --truncate-target",
        pipeline.display(),
        flow.name
    );
    let _ = writeln!(
        s,
        "     python SCRIPT.py --flow {}          (or spark-submit, docs/spark.md)",
        flow.name
    );
    match crate::checkpoint_tools::actions::plan_reset(&flow.checkpoint, target, true).await {
        Ok(plan) => {
            let _ = writeln!(s, "   dry-run of the reset:");
            for line in plan.render().lines() {
                let _ = writeln!(s, "     {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(s, "   dry-run of the reset: not available: {e}");
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "2. Let weir drain, then start Spark after it: run weir until its input is consumed and its state \
         has emitted what it holds, stop it, and start the Spark query where weir's input ended, with an \
         empty state:"
    );
    let _ = writeln!(
        s,
        "     weir run {} --flow {} --trigger available-now",
        pipeline.display(),
        flow.name
    );
    match &flow.source {
        SourceSpec::Delta(d) => {
            let cp = Checkpoint::at(&flow.checkpoint);
            let version = cp
                .latest_offsets()
                .ok()
                .flatten()
                .and_then(|(_, o)| o.offsets.first().cloned().flatten())
                .and_then(|v| crate::source::delta::DeltaOffset::from_json(&v).ok());
            let start = version.as_ref().map(|o| {
                if o.index == -1 {
                    o.reservoir_version
                } else {
                    o.reservoir_version + 1
                }
            });
            let _ = writeln!(
                s,
                "   dry-run: weir's last offset of {}: {}",
                d.path.display(),
                match &version {
                    Some(o) => format!("version {}, index {}", o.reservoir_version, o.index),
                    None => "none (nothing read yet)".into(),
                }
            );
            let _ = writeln!(
                s,
                "   the Spark query would start with startingVersion = {} (set `starting_version = {}` on the \
                 flow, export again), writing to {}",
                start.map_or("0".to_string(), |v| v.to_string()),
                start.unwrap_or(0),
                target.map_or("its sink".to_string(), |t| t.display().to_string())
            );
        }
        SourceSpec::Kafka(k) => {
            let _ = writeln!(
                s,
                "   dry-run: Spark's Kafka source reads the same offsets (KafkaSourceOffset JSON in offsets/N); \
                 start the Spark query on {} with startingOffsets set to weir's last offsets (weir inspect shows them)",
                k.locator.display()
            );
        }
        SourceSpec::Files(f) => {
            let _ = writeln!(
                s,
                "   dry-run: a files source has no version to start at: move the files weir ingested out of {} \
                 (or land new files in a new directory) before starting Spark on it",
                f.path.display()
            );
        }
    }
    if let Some(held) = last_state_rows(&flow.checkpoint) {
        let _ = writeln!(
            s,
            "   weir's state holds {held} row(s) now (last progress record): groups or keys still open there \
             are lost on this path unless weir has emitted them; wait for 0"
        );
    }
    s
}

/// `stateOperators[0].numRowsTotal` of the last progress record.
fn last_state_rows(checkpoint: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(Checkpoint::at(checkpoint).progress_path()).ok()?;
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?;
    let v: serde_json::Value = serde_json::from_str(last).ok()?;
    v["stateOperators"][0]["numRowsTotal"].as_u64()
}

/// A file's URI as Spark's file source logs it in `sources/0/N` (`file:///dir/a%20b.csv`:
/// an empty authority, then the path encoded as in `_metadata.file_path`). Spark keys the
/// files it has seen by this text, so it must be the same byte for byte.
pub fn file_uri(path: &str) -> String {
    format!("file://{}", crate::source::files::uri_path(Path::new(path)))
}

/// Writes the Spark checkpoint of a stateless flow. Refuses a checkpoint directory that
/// exists (weir never overwrites or deletes one) and a flow that is running.
pub fn write(flow: &FlowSpec) -> Result<HandedOver> {
    if let Some(reason) = stateful_reason(flow) {
        return Err(Error::checkpoint(
            &flow.checkpoint,
            format!("cannot hand over: {reason}"),
        ));
    }
    if let SinkSpec::Delta {
        idempotent: false, ..
    } = &flow.sink
    {
        return Err(Error::checkpoint(
            &flow.checkpoint,
            "cannot hand over a sink with idempotent = false",
        ));
    }
    let weir = Checkpoint::at(&flow.checkpoint);
    if !weir.metadata_path().exists() {
        return Err(Error::checkpoint(
            &flow.checkpoint,
            "no weir checkpoint here (no metadata): the flow never ran; nothing to hand over, start the Spark script directly",
        ));
    }
    // Held while reading: weir must not run a batch meanwhile.
    let _lock = CheckpointLock::acquire(&weir)?;
    let target = super::spark_checkpoint(&flow.checkpoint);
    if target.exists()
        && std::fs::read_dir(&target)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Error::checkpoint(
            &target,
            "the Spark checkpoint already exists; move it aside first (weir never overwrites or deletes a checkpoint)",
        ));
    }
    let meta = weir.read_metadata()?;
    let offsets = Checkpoint::batch_ids(&weir.offsets_dir())?;
    let commits = Checkpoint::batch_ids(&weir.commits_dir())?;
    let last_committed = commits.last().copied();
    let pending = offsets
        .last()
        .copied()
        .filter(|o| Some(*o) != last_committed);
    if let Some(p) = pending
        && last_committed.is_some_and(|c| c + 1 != p)
    {
        return Err(Error::checkpoint(
            weir.offsets_dir(),
            format!(
                "batch {p} is planned but batch {} is not committed: more than one batch is pending; run weir once to recover first",
                p - 1
            ),
        ));
    }
    let spark = Checkpoint::at(&target);
    create_dir_private(&target)?;
    write_atomic(
        &spark.metadata_path(),
        format!("{{\"id\":\"{}\"}}", meta.id).as_bytes(),
    )?;
    create_dir_private(&spark.offsets_dir())?;
    create_dir_private(&spark.commits_dir())?;
    let conf: std::collections::BTreeMap<String, String> = SPARK_CONF
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for &id in &offsets {
        let mut seq: OffsetSeq = weir.read_offsets(id)?;
        seq.metadata.conf = conf.clone();
        if let SourceSpec::Files(_) = &flow.source {
            seq.offsets = vec![Some(serde_json::json!({ "logOffset": id }))];
        } else {
            seq.offsets.truncate(1);
        }
        write_atomic(&spark.offsets_path(id), seq.render().as_bytes())?;
    }
    for &id in &commits {
        let c: CommitMetadata = weir.read_commit(id)?;
        write_atomic(&spark.commit_path(id), c.render().as_bytes())?;
    }
    let mut files = 0u64;
    if let SourceSpec::Files(_) = &flow.source {
        let log = target.join("sources").join("0");
        create_dir_private(&target.join("sources"))?;
        create_dir_private(&log)?;
        let ledger = Ledger::open_read_only(&weir.ledger_path())?;
        let mut all: Vec<String> = Vec::new();
        let entry = |id: u64, f: &crate::source::files::ledger::ListedFile| {
            serde_json::json!({
                "path": file_uri(&f.path),
                "timestamp": f.modification_time_ms,
                "batchId": id,
            })
            .to_string()
        };
        // Batches before the first entry kept (min_batches_to_retain) are committed; their
        // files go into the first entry's log file, so Spark knows them as seen and never
        // reads them again (the first kept batch is committed whenever any was removed).
        let purged: Vec<String> = match (&ledger, offsets.first()) {
            (Some(l), Some(&first)) if first > 0 => l
                .files_before_batch(first)?
                .iter()
                .map(|(id, f)| entry(*id, f))
                .collect(),
            _ => Vec::new(),
        };
        for &id in &offsets {
            let batch = match &ledger {
                Some(l) => l.files_for_batch(id)?,
                None => Vec::new(),
            };
            let mut lines: Vec<String> = Vec::new();
            if Some(&id) == offsets.first() {
                lines.extend(purged.iter().cloned());
            }
            lines.extend(batch.iter().map(|f| entry(id, f)));
            files += lines.len() as u64;
            all.extend(lines.iter().cloned());
            let (name, body) = if (id + 1) % COMPACT_INTERVAL == 0 {
                (format!("{id}.compact"), &all)
            } else {
                (id.to_string(), &lines)
            };
            let mut text = String::from("v1");
            for l in body.iter() {
                text.push('\n');
                text.push_str(l);
            }
            write_atomic(&log.join(name), text.as_bytes())?;
        }
    }
    Ok(HandedOver {
        flow: flow.name.clone(),
        checkpoint: target,
        batches: offsets.len() as u64,
        last_committed,
        pending,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_are_percent_encoded_like_sparks() {
        assert_eq!(
            file_uri("/tmp/in/sub dir/a b.csv"),
            "file:///tmp/in/sub%20dir/a%20b.csv"
        );
        assert_eq!(file_uri("/tmp/in/c.csv"), "file:///tmp/in/c.csv");
        // As Spark 4.2 logged these names (tests/fixtures/spark/file-uris.txt).
        let fixture = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spark/file-uris.txt"),
        )
        .unwrap();
        let mut checked = 0;
        for line in fixture
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (name, rest) = line.split_once('\t').unwrap();
            let fields: Vec<&str> = rest.split('\t').collect();
            let path = format!("/tmp/exp2/in/{name}");
            assert_eq!(file_uri(&path), fields[0], "{name}");
            let path = Path::new(&path);
            assert_eq!(crate::source::files::file_url(path), fields[1], "{name}");
            assert_eq!(
                crate::source::files::file_url_name(path),
                fields[2],
                "{name}"
            );
            checked += 1;
        }
        assert!(checked >= 10);
    }
}
