//! `weir validate PIPELINE`: checks a pipeline file without running anything.
//!
//! Checks the TOML, every key and value, the SQL syntax of `where`/`select`,
//! and, when the source schema is given, plans the flow against it as the engine
//! does (`engine::plan`, without state) so that unknown columns are reported
//! before a run.

use std::path::Path;
use std::process::ExitCode;

use super::{EXIT_INVALID, runtime};
use crate::engine::plan;
use crate::pipeline;
use crate::spec::{SinkSpec, SourceSpec};

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
    'flows: for flow in &pipeline.flows {
        // The schemas to plan against, when they are known without running: a files
        // source's given schema, or the current schema of a Delta source's table.
        let mut schemas = Vec::new();
        for source in flow.sources() {
            match rt.block_on(plan::known_batch_schema(source, None)) {
                Ok(s) => schemas.push(s),
                Err(e) => {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue 'flows;
                }
            }
        }
        // Expectations see the stream's rows before `where`/`select`: planned as soon as
        // that schema is known (else at the run's start, before its first batch).
        if !flow.expectations.is_empty() {
            let stream: Option<Vec<_>> = if flow.is_union() {
                schemas.iter().cloned().collect()
            } else {
                schemas.first().cloned().flatten().map(|s| vec![s])
            };
            match stream {
                Some(stream) => {
                    if let Err(e) = plan::plan_expectations(flow, &stream) {
                        match e {
                            crate::Error::Pipeline(e) => eprintln!("error: {e}"),
                            e => eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name),
                        }
                        ok = false;
                        continue;
                    }
                }
                None => println!(
                    "flow {}: expectations not planned: the source's schema is inferred at the first run (their columns are checked then, before anything is written)",
                    flow.name
                ),
            }
            println!(
                "flow {}: expectations {}",
                flow.name,
                flow.expectations
                    .iter()
                    .map(|e| format!("{} ({})", e.name, e.on_violation))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(sj) = &flow.stream_join {
            // `where`/`select` apply to the joined rows: plan them once both sides are known.
            if let (Some(Some(left)), Some(Some(right))) = (schemas.first(), schemas.get(1)) {
                let checked = rt.block_on(async {
                    let (_, projected) = plan::plan_projection(flow, left).await?;
                    plan::check_operator(flow, &projected, Some(right))
                });
                if let Err(e) = checked {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue;
                }
            }
            println!(
                "flow {}: stream-stream join ({}) with {} {} as {}",
                flow.name,
                match sj.how {
                    crate::spec::JoinType::Inner => "inner",
                    crate::spec::JoinType::Left => "left outer",
                },
                sj.source.kind(),
                sj.source.path().display(),
                sj.alias
            );
        }
        if flow.is_union() {
            println!(
                "flow {}: union of {} sources by column name ({}), multiple_watermark_policy = \"{}\"",
                flow.name,
                flow.sources().len(),
                flow.sources()
                    .iter()
                    .map(|s| format!("{} {}", s.kind(), s.path().display()))
                    .collect::<Vec<_>>()
                    .join(", "),
                flow.multiple_watermark_policy.as_str()
            );
        }
        let input = match &flow.stream_join {
            Some(_) => None,
            // A union is planned once every source's schema is known.
            None if flow.is_union() => match schemas.iter().cloned().collect::<Option<Vec<_>>>() {
                Some(all) => match plan::stream_schema(flow, &all) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                        ok = false;
                        continue;
                    }
                },
                None => None,
            },
            None => schemas.first().cloned().flatten(),
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
            let projected = match rt.block_on(plan::plan_projection(flow, input)) {
                Ok((_, p)) => p,
                Err(e) => {
                    eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                    ok = false;
                    continue;
                }
            };
            // Column names a Delta table cannot store without column mapping: refused
            // now, with the fixes, rather than at the first batch.
            let unmapped_table = match &flow.sink {
                SinkSpec::Delta {
                    path: table,
                    column_mapping_mode: None,
                    ..
                }
                | SinkSpec::DeltaMerge { path: table, .. } => Some(table),
                _ => None,
            };
            if let Some(table) = unmapped_table.filter(|t| !t.join("_delta_log").exists())
                && let Err(e) = crate::sink::delta::check_column_names(table, &projected)
            {
                eprintln!("error: {}: flow {:?}: {e}", path.display(), flow.name);
                ok = false;
                continue;
            }
            // Columns the postgres sink cannot map (nested types): refused now, naming
            // them, rather than at the first batch (a stateless flow's rows are these).
            if let SinkSpec::Postgres { table, .. } = &flow.sink
                && !flow.stateful.is_stateful()
                && flow.stream_join.is_none()
                && let Some(e) = projected
                    .fields()
                    .iter()
                    .find_map(|f| crate::sink::postgres::types::Column::of(f).err())
            {
                eprintln!(
                    "error: {}: flow {:?}: postgres table {table}: {e}",
                    path.display(),
                    flow.name
                );
                ok = false;
                continue;
            }
            if let Err(e) = plan::check_operator(flow, &projected, None) {
                let message = match e {
                    crate::Error::Plan { message, .. } => message,
                    e => e.to_string(),
                };
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
            SinkSpec::Postgres {
                url, table, keys, ..
            } => {
                if keys.is_empty() {
                    format!("postgres {table} at {url}")
                } else {
                    format!("postgres {table} at {url} upserted on {}", keys.join(", "))
                }
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
                SourceSpec::Kafka(k) => format!("kafka {}", k.bootstrap_servers),
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
