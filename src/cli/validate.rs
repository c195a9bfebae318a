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
        let input = match &flow.source {
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
                match rt.block_on(source.refresh()) {
                    Ok(_) => source.schema(),
                    Err(e) => {
                        eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                        ok = false;
                        continue;
                    }
                }
            }
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
