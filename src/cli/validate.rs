//! `weir validate PIPELINE`: checks a pipeline file without running anything.
//!
//! Checks the TOML, every key and value, the SQL syntax of `where`/`select`,
//! and, when the source schema is given, plans `where`/`select` against it so
//! that unknown columns are reported before a run.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use super::{EXIT_INVALID, runtime};
use crate::ops::Projection;
use crate::pipeline::{self, SinkSpec, SourceSpec};
use crate::source::files::{RESCUED_DATA_COLUMN, batch_schema};

pub fn run(path: &Path) -> ExitCode {
    let pipeline = match pipeline::load(path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ok = true;
    for flow in &pipeline.flows {
        // The schema to plan `where`/`select` against, when it is known without running:
        // a files source's given schema, or the current schema of a Delta source's table.
        let input = match known_schema(&rt, &flow.source) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                ok = false;
                continue;
            }
        };
        if let Some(sj) = &flow.stream_join {
            // `where`/`select` apply to the joined rows: plan them once both sides are known.
            let right = match known_schema(&rt, &sj.source) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue;
                }
            };
            if let (Some(left), Some(right)) = (&input, &right) {
                let plan = crate::ops::stream_join::JoinPlan {
                    flow: &flow.name,
                    left_watermark: flow.stateful.watermark.as_ref(),
                    join: sj,
                    where_: flow.where_.as_deref(),
                    select: flow.select.as_deref(),
                };
                if let Err(e) = crate::ops::stream_join::check_plan(&plan, left, right) {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue;
                }
            }
            println!(
                "flow {}: stream-stream join ({}) with {} {} as {}",
                flow.name,
                match sj.how {
                    crate::ops::join::JoinType::Inner => "inner",
                    crate::ops::join::JoinType::Left => "left outer",
                },
                sj.source.kind(),
                sj.source.path().display(),
                sj.alias
            );
        }
        let input = if flow.stream_join.is_some() {
            None
        } else {
            input
        };
        // Join tables written by another flow may not exist before the first run.
        let dims_missing: Vec<String> = flow
            .joins
            .iter()
            .filter(|j| !j.table.exists())
            .map(|j| j.table.display().to_string())
            .collect();
        if !dims_missing.is_empty() && input.is_some() {
            println!(
                "flow {}: `where`/`select` not planned: join table(s) {} do not exist yet",
                flow.name,
                dims_missing.join(", ")
            );
        }
        if let Some(input) = input.as_ref().filter(|_| dims_missing.is_empty()) {
            let mut projection = Projection::with_joins(
                &flow.name,
                input,
                flow.where_.as_deref(),
                flow.select.as_deref(),
                &flow.joins,
            );
            let projected = match rt.block_on(projection.check(input)) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue;
                }
            };
            if (flow.stateful.is_stateful() || flow.stateful.watermark.is_some())
                && let Err(message) = crate::ops::stateful::validate(&flow.stateful, &projected)
            {
                eprintln!("error: {}: flow {:?}: {message}", path.display(), flow.name);
                ok = false;
                continue;
            }
        }
        let sink = match &flow.sink {
            SinkSpec::Delta { path, .. } => format!("delta {}", path.display()),
            SinkSpec::DeltaMerge { path, keys, .. } => {
                format!("delta_merge {} on {}", path.display(), keys.join(", "))
            }
            SinkSpec::Memory { name } => format!("memory {name}"),
            SinkSpec::Console { .. } => "console".to_string(),
        };
        println!(
            "flow {}: {} {} -> {sink}; trigger {}; checkpoint {}",
            flow.name,
            match &flow.source {
                SourceSpec::Files(src) => format!("files ({})", src.format.as_str()),
                SourceSpec::Delta(_) => "delta".to_string(),
            },
            flow.source.path().display(),
            flow.trigger,
            flow.checkpoint.display()
        );
    }
    if ok {
        println!(
            "{}: valid ({} flow(s))",
            path.display(),
            pipeline.flows.len()
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID)
    }
}

/// A source's batch schema when it is known without running: a files source's given
/// schema (plus `_rescued_data`, `_metadata`), or the current schema of a Delta table.
fn known_schema(
    rt: &tokio::runtime::Runtime,
    source: &SourceSpec,
) -> crate::Result<Option<arrow::datatypes::SchemaRef>> {
    Ok(match source {
        SourceSpec::Files(src) => src.schema.as_ref().map(|schema| {
            let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
            fields.push(Arc::new(arrow::datatypes::Field::new(
                RESCUED_DATA_COLUMN,
                arrow::datatypes::DataType::Utf8,
                true,
            )));
            batch_schema(&Arc::new(arrow::datatypes::Schema::new(fields)))
        }),
        SourceSpec::Delta(options) => {
            let mut source = crate::source::delta::DeltaSource::new(options.clone());
            rt.block_on(source.refresh())?;
            source.schema()
        }
    })
}
