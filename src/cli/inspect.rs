//! `weir inspect CHECKPOINT [--json]`: a read-only report of a checkpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{report, runtime};
use crate::checkpoint_tools::inspect::{Inspection, inspect};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The flow's checkpoint directory (weir's or an Apache Spark query's).
    pub checkpoint: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &InspectArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    // A checkpoint on an object store is read from a local copy (docs/object-storage.md).
    let checkpoint = match rt.block_on(crate::storage::mirror::local_copies(std::slice::from_ref(
        &args.checkpoint,
    ))) {
        Ok((mut locals, _)) => locals.pop().unwrap_or_else(|| args.checkpoint.clone()),
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    if checkpoint != args.checkpoint
        && !checkpoint.join("metadata").is_file()
        && !checkpoint.join("offsets").is_dir()
    {
        eprintln!(
            "error: {}: no checkpoint there (no metadata, no offsets/)",
            args.checkpoint.display()
        );
        return ExitCode::FAILURE;
    }
    let args = &InspectArgs {
        checkpoint,
        json: args.json,
    };
    if crate::spark::is_spark_checkpoint(&args.checkpoint) {
        return run_spark(args);
    }
    if crate::copy_into::is_loaded_table(&args.checkpoint) {
        return run_copy_into(&rt, args);
    }
    let inspection = match rt.block_on(inspect(&args.checkpoint)) {
        Ok(i) => i,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    if !print(args.json, &inspection, render_text) {
        return ExitCode::FAILURE;
    }
    if inspection.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A Delta table loaded by `weir copy-into` (its `_weir_copy_into/` ledger).
fn run_copy_into(rt: &tokio::runtime::Runtime, args: &InspectArgs) -> ExitCode {
    let inspection = match rt.block_on(crate::copy_into::inspect(&args.checkpoint)) {
        Ok(i) => i,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    if !print(args.json, &inspection, crate::copy_into::render_inspection) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// A Spark checkpoint (`metadata` + `offsets/`, no `_weir/`).
fn run_spark(args: &InspectArgs) -> ExitCode {
    let inspection = match crate::spark::inspect::inspect(&args.checkpoint) {
        Ok(i) => i,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    if !print(args.json, &inspection, crate::spark::inspect::render_text) {
        return ExitCode::FAILURE;
    }
    if inspection.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Prints an inspection as pretty JSON (`--json`) or as text; false when it could not.
fn print<T: serde::Serialize>(json: bool, inspection: &T, text: impl Fn(&T) -> String) -> bool {
    if !json {
        print!("{}", text(inspection));
        return true;
    }
    match serde_json::to_string_pretty(inspection) {
        Ok(s) => {
            println!("{s}");
            true
        }
        Err(e) => {
            report(&e);
            false
        }
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// The human form of an inspection.
pub fn render_text(i: &Inspection) -> String {
    let mut out = String::new();
    out.push_str(&format!("checkpoint  {}\n", i.checkpoint.display()));
    out.push_str(&format!("flow        {}\n", opt(i.flow.as_deref())));
    out.push_str(&format!("query id    {}\n", opt(i.query_id.as_deref())));
    out.push_str(&format!(
        "batches     last planned {}, last committed {}, pending {}\n",
        opt(i.last_batch_id),
        opt(i.last_committed_batch_id),
        opt(i.pending_batch_id)
    ));
    out.push_str(&format!("watermark   {} ms\n", i.watermark_ms));
    let union_watermarks = i
        .sources
        .iter()
        .any(|s| s.watermark_ms.is_some() || s.holds_watermark);
    for (n, s) in i.sources.iter().enumerate() {
        out.push_str(&format!(
            "source      {} {} latest offset {}\n",
            s.description,
            s.path
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string()),
            opt(s.latest_offset.as_ref())
        ));
        // A union's sources: each one's own watermark, and which one is the flow's.
        if union_watermarks {
            out.push_str(&format!(
                "            watermark {}{}\n",
                s.watermark_ms
                    .map_or("- (no data yet: counts as 0)".to_string(), |w| format!(
                        "{} ms ({})",
                        w,
                        crate::records::iso_millis(w)
                    )),
                if s.holds_watermark {
                    ", holds the flow's watermark"
                } else {
                    ""
                }
            ));
        }
        if let Some(k) = &s.kafka {
            out.push_str(
                "            kafka partition      initial    committed    pending    latest at last batch\n",
            );
            for p in &k.partitions {
                out.push_str(&format!(
                    "            {:<20} {:<10} {:<12} {:<10} {}\n",
                    format!("{}-{}", p.topic, p.partition),
                    opt(p.initial),
                    opt(p.committed),
                    opt(p.pending),
                    match (p.latest, p.committed.or(p.initial)) {
                        (Some(l), Some(c)) => format!("{l} ({} behind)", (l - c).max(0)),
                        (Some(l), None) => l.to_string(),
                        _ => "-".into(),
                    }
                ));
            }
            if k.offsets_lost > 0 {
                out.push_str(&format!(
                    "            {} offset(s) skipped as lost (fail_on_data_loss = false; numOffsetsLost)\n",
                    k.offsets_lost
                ));
            }
        }
        // Source 0's ledger is printed below; another source's (a join's right side) here.
        if n > 0
            && let Some(l) = &s.ledger
        {
            out.push_str(&format!(
                "            ledger {} committed ({} bytes), {} pending, {} failed\n",
                l.files_committed, l.bytes_committed, l.files_pending, l.files_failed
            ));
        }
    }
    if let Some(l) = &i.ledger {
        out.push_str(&format!(
            "ledger      {} committed ({} bytes), {} pending, {} failed, {} modified after ingestion",
            l.files_committed, l.bytes_committed, l.files_pending, l.files_failed, l.files_modified_after_ingestion
        ));
        if l.files_existing_skipped > 0 {
            out.push_str(&format!(
                ", {} skipped as present at the first start (include_existing_files = false)",
                l.files_existing_skipped
            ));
        }
        if l.files_retrying > 0 {
            out.push_str(&format!(
                ", {} unreadable and waiting to be retried",
                l.files_retrying
            ));
        }
        out.push('\n');
    }
    if let Some(s) = &i.sink {
        out.push_str(&format!(
            "sink        {} (Delta version {}, last batch committed for this query {})\n",
            s.description,
            opt(s.delta_version),
            opt(s.txn_version)
        ));
    }
    if let Some(t) = i.sink.as_ref().and_then(|s| s.table.as_ref()) {
        out.push_str(&format!(
            "table       {} file(s), {}; {} smaller than the target file size {}\n",
            t.files,
            bytesize::ByteSize(t.bytes),
            t.small_files,
            bytesize::ByteSize(t.target_file_size)
        ));
    }
    let d = &i.disk;
    out.push_str(&format!(
        "disk        {} in the checkpoint: {} offsets, {} commits, state {}, ledger {}\n",
        bytesize::ByteSize(d.checkpoint_bytes),
        d.offsets_files,
        d.commits_files,
        bytesize::ByteSize(d.state_bytes),
        bytesize::ByteSize(d.ledger_bytes)
    ));
    match &i.lock {
        Some(h) => out.push_str(&format!(
            "lock        held by pid {} on {} since {}\n",
            h.pid, h.host, h.started_at
        )),
        None => out.push_str("lock        free\n"),
    }
    out.push_str("\n batch  state      offset            rows   files  ms      delta\n");
    for b in &i.batches {
        out.push_str(&format!(
            " {:<6} {:<10} {:<17} {:<6} {:<6} {:<7} {}\n",
            b.batch_id,
            if b.committed { "committed" } else { "pending" },
            opt(b.end_offset.as_ref()),
            opt(b.num_input_rows),
            opt(b.num_files),
            opt(b.duration_ms),
            opt(b.delta_version)
        ));
    }
    // Each expectation over the batches listed: rows passed and failed, and the share
    // of rows that failed it.
    let mut expectations: Vec<(&str, u64, u64)> = Vec::new();
    for e in i.batches.iter().flat_map(|b| &b.expectations) {
        match expectations.iter_mut().find(|(n, _, _)| *n == e.name) {
            Some((_, p, f)) => {
                *p += e.passed_records;
                *f += e.failed_records;
            }
            None => expectations.push((&e.name, e.passed_records, e.failed_records)),
        }
    }
    if !expectations.is_empty() {
        out.push_str("\nexpectations (batches above)\n name                     passed      failed      failed %\n");
        for (name, p, f) in expectations {
            let rate = if p + f == 0 {
                0.0
            } else {
                100.0 * f as f64 / (p + f) as f64
            };
            out.push_str(&format!(" {name:<24} {p:<11} {f:<11} {rate:.2}\n"));
        }
    }
    for op in &i.state_operators {
        out.push_str(&format!(
            "\nstate {}{}: {} keyed by [{}], {} version(s), {} bytes\n version  delta bytes  snapshot bytes\n",
            op.operator_id,
            op.side.as_deref().map_or(String::new(), |s| format!(" ({s})")),
            op.operator_name.as_deref().unwrap_or("?"),
            op.key_columns.join(", "),
            op.versions.len(),
            op.total_bytes
        ));
        for v in &op.versions {
            out.push_str(&format!(
                " {:<8} {:<12} {}\n",
                v.version,
                opt(v.delta_bytes),
                opt(v.snapshot_bytes)
            ));
        }
    }
    if !i.schema_history.is_empty() {
        out.push_str("\nschema history\n");
        for v in &i.schema_history {
            out.push_str(&format!(
                " v{} {} {}{}\n",
                v.version,
                crate::records::iso_millis(v.created_at_ms),
                v.reason,
                if v.added.is_empty() {
                    String::new()
                } else {
                    format!(" (added {})", v.added.join(", "))
                }
            ));
        }
    }
    if let Some(h) = &i.health {
        out.push_str(&format!("\nhealth      {} (at {})\n", h.health.state, h.at));
        for r in &h.health.evidence.reasons {
            out.push_str(&format!("  {r}\n"));
        }
    }
    for w in &i.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    for p in &i.problems {
        out.push_str(&format!("problem: {p}\n"));
    }
    out
}
