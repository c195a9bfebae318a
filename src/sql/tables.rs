//! Which tables `weir sql` sees, under which names (docs/sql.md, "Tables"):
//!
//! - `<flow>`: the flow's Delta sink table;
//! - `<flow>_late_rows`: its `late_rows` table;
//! - `<flow>_dropped_rows`: the rows its `drop` expectations removed (`quarantine_path`);
//! - `<flow>_quarantine`: its quarantine (`bad_records_table`, else the JSON-lines files
//!   of `bad_records_path`);
//! - `<parent>.<name>`: every Delta table the pipeline writes or reads (sinks, Delta
//!   sources, Delta dimension tables, late rows, quarantine tables) by the last two
//!   components of its path (`lake/bronze/flights` is `bronze.flights`), unless two
//!   tables share those two components;
//! - `progress`: every flow's progress records (see `progress.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::catalog::MemorySchemaProvider;
use datafusion::common::TableReference;
use datafusion::datasource::TableProvider;
use datafusion::prelude::SessionContext;

use crate::spec::{FilesSource, FlowSpec, SinkSpec, SourceSpec, normalize};

/// What one flow contributes to the catalog.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FlowTables {
    pub flow: String,
    /// The flow's checkpoint (its progress records), if known.
    pub checkpoint: Option<PathBuf>,
    /// The Delta table the flow writes.
    pub sink: Option<PathBuf>,
    /// Delta tables the flow reads (streams and dimension tables).
    pub reads: Vec<PathBuf>,
    pub late_rows: Option<PathBuf>,
    /// `quarantine_path`: the rows the `drop` expectations removed.
    pub dropped_rows: Option<PathBuf>,
    /// `bad_records_table`.
    pub quarantine_table: Option<PathBuf>,
    /// `bad_records_path` (JSON lines, one file per batch).
    pub quarantine_files: Option<PathBuf>,
    /// The flow's first source when it is a files source (to peek at its input files;
    /// peeks run in process, so a query's child process does not get it).
    #[serde(skip)]
    pub files_source: Option<Box<FilesSource>>,
}

impl FlowTables {
    /// The tables of a flow of a pipeline file.
    pub fn of(flow: &FlowSpec) -> Self {
        let (quarantine_table, quarantine_files) = match &flow.source {
            SourceSpec::Files(f) => (f.bad_records_table.clone(), f.bad_records_path.clone()),
            SourceSpec::Kafka(k) => (k.bad_records_table.clone(), k.bad_records_path.clone()),
            SourceSpec::Delta(_) => (None, None),
        };
        FlowTables {
            flow: flow.name.clone(),
            checkpoint: Some(flow.checkpoint.clone()),
            sink: match &flow.sink {
                SinkSpec::Delta { path, .. } | SinkSpec::DeltaMerge { path, .. } => {
                    Some(normalize(path))
                }
                _ => None,
            },
            reads: flow.reads(),
            late_rows: flow.late_rows.as_deref().map(normalize),
            dropped_rows: flow.quarantine_path.as_deref().map(normalize),
            quarantine_table: quarantine_table.as_deref().map(normalize),
            quarantine_files: quarantine_files.as_deref().map(normalize),
            files_source: match &flow.source {
                SourceSpec::Files(f) => Some(Box::new(f.clone())),
                _ => None,
            },
        }
    }

    /// The tables of a flow known only by its checkpoint (`weir attach`): its sink, Delta
    /// sources and dimension tables, late rows and quarantine table, as the checkpoint's
    /// plan record names them.
    pub fn from_checkpoint(flow: &str, checkpoint: &Path) -> Self {
        let mut out = FlowTables {
            flow: flow.to_string(),
            checkpoint: Some(checkpoint.to_path_buf()),
            ..Default::default()
        };
        if let Ok(Some(plan)) = crate::checkpoint::Checkpoint::at(checkpoint).read_plan() {
            out.sink = plan.sink_path.as_deref().map(normalize);
            if plan.source == "delta" {
                out.reads.push(normalize(&plan.source_path));
            }
            for s in plan.other_sources.iter().chain(&plan.dimensions) {
                if s.source == "delta" {
                    out.reads.push(normalize(&s.source_path));
                }
            }
            for t in &plan.side_tables {
                match t.key.as_str() {
                    "late_rows" => out.late_rows = Some(normalize(&t.path)),
                    "quarantine_path" => out.dropped_rows = Some(normalize(&t.path)),
                    "bad_records_table" if out.quarantine_table.is_none() => {
                        out.quarantine_table = Some(normalize(&t.path))
                    }
                    _ => {}
                }
            }
        }
        out
    }
}

/// The tables of every flow of a pipeline.
pub fn pipeline_tables(pipeline: &crate::spec::Pipeline) -> Vec<FlowTables> {
    pipeline.flows.iter().map(FlowTables::of).collect()
}

/// What a table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// A flow's sink table, by the flow's name.
    Sink,
    LateRows,
    Quarantine,
    /// A Delta table by the last two components of its path.
    Path,
    Progress,
}

impl TableKind {
    pub fn label(self) -> &'static str {
        match self {
            TableKind::Sink => "sink",
            TableKind::LateRows => "late rows",
            TableKind::Quarantine => "quarantine",
            TableKind::Path => "by path",
            TableKind::Progress => "progress",
        }
    }
}

/// A table's name in SQL: bare (`silver_flights`) or schema-qualified (`bronze.flights`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TableName {
    Bare(String),
    Qualified(String, String),
}

impl TableName {
    pub fn reference(&self) -> TableReference {
        match self {
            TableName::Bare(n) => TableReference::bare(n.as_str()),
            TableName::Qualified(s, n) => TableReference::partial(s.as_str(), n.as_str()),
        }
    }

    /// As it is written in a query (quoted where it must be).
    pub fn sql(&self) -> String {
        match self {
            TableName::Bare(n) => quote_ident(n),
            TableName::Qualified(s, n) => format!("{}.{}", quote_ident(s), quote_ident(n)),
        }
    }

    /// The name DataFusion's "table not found" errors show (`datafusion.public.x`,
    /// `datafusion.bronze.flights`), without the default catalog and schema.
    pub fn matches_reference(&self, shown: &str) -> bool {
        let shown = shown.strip_prefix("datafusion.").unwrap_or(shown);
        let shown = shown.strip_prefix("public.").unwrap_or(shown);
        match self {
            TableName::Bare(n) => shown == n,
            TableName::Qualified(s, n) => shown == format!("{s}.{n}"),
        }
    }
}

/// `name` as an SQL identifier: as is when it is a plain identifier (letters, digits and
/// `_`, not starting with a digit), else double-quoted (`"bronze-flights"`).
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Where a table's rows come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    Delta(PathBuf),
    /// JSON-lines files of a `bad_records_path`.
    QuarantineFiles(PathBuf),
    Progress,
}

/// One name the catalog registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    pub name: TableName,
    pub kind: TableKind,
    pub flow: Option<String>,
    pub backing: Backing,
}

/// The names of a pipeline's tables, and the names left out (with why).
#[derive(Debug, Clone, Default)]
pub struct Naming {
    pub entries: Vec<TableEntry>,
    pub notes: Vec<String>,
}

/// The name of the progress table.
pub const PROGRESS_TABLE: &str = "progress";

/// Names every table of the flows (see the module doc for the rules).
pub fn name_tables(flows: &[FlowTables]) -> Naming {
    let mut naming = Naming::default();
    let mut taken: BTreeMap<TableName, String> = BTreeMap::new();
    let mut add = |naming: &mut Naming, entry: TableEntry, what: String| {
        if let Some(first) = taken.get(&entry.name) {
            naming.notes.push(format!(
                "{} is not registered for {what}: the name is taken by {first}",
                entry.name.sql()
            ));
            return;
        }
        taken.insert(entry.name.clone(), what);
        naming.entries.push(entry);
    };
    add(
        &mut naming,
        TableEntry {
            name: TableName::Bare(PROGRESS_TABLE.into()),
            kind: TableKind::Progress,
            flow: None,
            backing: Backing::Progress,
        },
        "the progress records".into(),
    );
    for f in flows {
        if let Some(p) = &f.sink {
            add(
                &mut naming,
                TableEntry {
                    name: TableName::Bare(f.flow.clone()),
                    kind: TableKind::Sink,
                    flow: Some(f.flow.clone()),
                    backing: Backing::Delta(p.clone()),
                },
                format!("flow {}'s sink {}", f.flow, p.display()),
            );
        }
        if let Some(p) = &f.late_rows {
            add(
                &mut naming,
                TableEntry {
                    name: TableName::Bare(format!("{}_late_rows", f.flow)),
                    kind: TableKind::LateRows,
                    flow: Some(f.flow.clone()),
                    backing: Backing::Delta(p.clone()),
                },
                format!("flow {}'s late rows {}", f.flow, p.display()),
            );
        }
        if let Some(p) = &f.dropped_rows {
            add(
                &mut naming,
                TableEntry {
                    name: TableName::Bare(format!("{}_dropped_rows", f.flow)),
                    kind: TableKind::Quarantine,
                    flow: Some(f.flow.clone()),
                    backing: Backing::Delta(p.clone()),
                },
                format!(
                    "flow {}'s rows dropped by expectations {}",
                    f.flow,
                    p.display()
                ),
            );
        }
        let quarantine = match (&f.quarantine_table, &f.quarantine_files) {
            (Some(t), _) => Some(Backing::Delta(t.clone())),
            (None, Some(d)) => Some(Backing::QuarantineFiles(d.clone())),
            (None, None) => None,
        };
        if let Some(backing) = quarantine {
            add(
                &mut naming,
                TableEntry {
                    name: TableName::Bare(format!("{}_quarantine", f.flow)),
                    kind: TableKind::Quarantine,
                    flow: Some(f.flow.clone()),
                    backing,
                },
                format!("flow {}'s quarantine", f.flow),
            );
        }
    }
    // Every Delta table by the last two components of its path.
    let mut paths: BTreeSet<PathBuf> = BTreeSet::new();
    for f in flows {
        paths.extend(f.sink.iter().cloned());
        paths.extend(f.reads.iter().cloned());
        paths.extend(f.late_rows.iter().cloned());
        paths.extend(f.dropped_rows.iter().cloned());
        paths.extend(f.quarantine_table.iter().cloned());
    }
    let mut by_name: BTreeMap<TableName, Vec<PathBuf>> = BTreeMap::new();
    for p in paths {
        if let Some(name) = path_name(&p) {
            by_name.entry(name).or_default().push(p);
        }
    }
    for (name, paths) in by_name {
        if paths.len() > 1 {
            naming.notes.push(format!(
                "{} is not registered: it names {} tables ({}); use their flows' names",
                name.sql(),
                paths.len(),
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        }
        let path = paths[0].clone();
        let flow = flows
            .iter()
            .find(|f| f.sink.as_ref() == Some(&path))
            .map(|f| f.flow.clone());
        add(
            &mut naming,
            TableEntry {
                name,
                kind: TableKind::Path,
                flow,
                backing: Backing::Delta(path.clone()),
            },
            format!("the table {}", path.display()),
        );
    }
    naming
}

/// `lake/bronze/flights` -> `bronze.flights`; `None` for a path of fewer than two
/// components or a parent named like a built-in schema.
pub fn path_name(path: &Path) -> Option<TableName> {
    let mut parts = path.components().rev().filter_map(|c| match c {
        std::path::Component::Normal(s) => Some(s.to_string_lossy().to_string()),
        _ => None,
    });
    let name = parts.next()?;
    let schema = parts.next()?;
    if schema == "information_schema" || schema == "public" {
        return None;
    }
    Some(TableName::Qualified(schema, name))
}

/// Registers a provider under a name, creating the schema of a qualified name.
pub(super) fn register(
    ctx: &SessionContext,
    name: &TableName,
    provider: Arc<dyn TableProvider>,
) -> datafusion::error::Result<()> {
    if let TableName::Qualified(schema, _) = name
        && let Some(catalog) = ctx.catalog("datafusion")
        && catalog.schema(schema).is_none()
    {
        catalog.register_schema(schema, Arc::new(MemorySchemaProvider::new()))?;
    }
    ctx.register_table(name.reference(), provider)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(name: &str, sink: &str, reads: &[&str]) -> FlowTables {
        FlowTables {
            flow: name.into(),
            sink: Some(PathBuf::from(sink)),
            reads: reads.iter().map(PathBuf::from).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn flows_and_paths_name_tables() {
        let mut gold = flow("gold", "/p/lake/gold/hourly", &["/p/lake/silver/flights"]);
        gold.late_rows = Some("/p/lake/late/hourly".into());
        let mut bronze = flow("bronze-flights", "/p/lake/bronze/flights", &[]);
        bronze.quarantine_files = Some("/p/quarantine".into());
        let flows = vec![
            bronze,
            flow(
                "silver",
                "/p/lake/silver/flights",
                &["/p/lake/bronze/flights"],
            ),
            gold,
        ];
        let naming = name_tables(&flows);
        let names: Vec<String> = naming.entries.iter().map(|e| e.name.sql()).collect();
        assert_eq!(
            names,
            [
                "progress",
                "\"bronze-flights\"",
                "\"bronze-flights_quarantine\"",
                "silver",
                "gold",
                "gold_late_rows",
                "bronze.flights",
                "gold.hourly",
                "late.hourly",
                "silver.flights",
            ]
        );
        assert!(naming.notes.is_empty(), "{:?}", naming.notes);
        let silver = naming
            .entries
            .iter()
            .find(|e| e.name == TableName::Qualified("silver".into(), "flights".into()))
            .unwrap();
        assert_eq!(silver.flow.as_deref(), Some("silver"));
    }

    #[test]
    fn ambiguous_and_taken_names_are_left_out_with_a_note() {
        let flows = vec![
            flow("a", "/x/t/events", &[]),
            flow("b", "/y/t/events", &[]),
            flow("progress", "/z/progress/p", &[]),
        ];
        let naming = name_tables(&flows);
        assert!(
            !naming
                .entries
                .iter()
                .any(|e| e.name == TableName::Qualified("t".into(), "events".into()))
        );
        assert!(
            naming.notes.iter().any(|n| n.contains("t.events")),
            "{:?}",
            naming.notes
        );
        assert!(
            naming
                .notes
                .iter()
                .any(|n| n.contains("progress is not registered for flow progress")),
            "{:?}",
            naming.notes
        );
        assert!(
            TableName::Qualified("bronze".into(), "flights".into())
                .matches_reference("datafusion.bronze.flights")
        );
        assert!(TableName::Bare("x".into()).matches_reference("datafusion.public.x"));
    }
}
