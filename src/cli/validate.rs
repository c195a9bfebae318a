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
        let SourceSpec::Files(src) = &flow.source;
        if let Some(schema) = &src.schema {
            let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
            fields.push(Arc::new(arrow::datatypes::Field::new(
                RESCUED_DATA_COLUMN,
                arrow::datatypes::DataType::Utf8,
                true,
            )));
            let read_schema = Arc::new(arrow::datatypes::Schema::new(fields));
            let input = batch_schema(&read_schema);
            let projection = Projection::new(
                &flow.name,
                &input,
                flow.where_.as_deref(),
                flow.select.as_deref(),
            );
            let projected = match rt.block_on(projection.check(&input)) {
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
            SinkSpec::Memory { name } => format!("memory {name}"),
            SinkSpec::Console { .. } => "console".to_string(),
        };
        println!(
            "flow {}: files ({}) {} -> {sink}; trigger {}; checkpoint {}",
            flow.name,
            src.format.as_str(),
            src.path.display(),
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
