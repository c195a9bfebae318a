//! `weir diff CHECKPOINT_A CHECKPOINT_B` or `weir diff CHECKPOINT --batches A B`:
//! offsets, watermark, files, state sizes and schema side by side. Reads only.
//!
//! Exit codes: 0 no difference; 1 differences (like `diff`); 2 usage; 1 also
//! when a checkpoint or batch cannot be read (the error says which).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{EXIT_INVALID, report};
use crate::checkpoint_tools::diff::{diff, render, side};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// A checkpoint directory.
    pub a: PathBuf,
    /// A second checkpoint directory (or use --batches).
    pub b: Option<PathBuf>,
    /// Two batch ids of the first checkpoint.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub batches: Option<Vec<u64>>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &DiffArgs) -> ExitCode {
    if crate::spark::is_spark_checkpoint(&args.a) {
        // Spark checkpoints: offsets per source, watermarks, files, state bytes and pinned confs.
        use crate::spark::inspect as spark;
        return compare(args, spark::side, spark::diff, spark::render_diff, |d| {
            d.changes.is_empty()
        });
    }
    compare(args, side, diff, render, |d| {
        d.changes.is_empty() && d.schema_changes.is_empty()
    })
}

/// Reads the two sides (two checkpoints, or two batches of one), diffs them and prints
/// the diff as text or JSON; exit 0 when `unchanged`, 1 otherwise or on a read error.
fn compare<S, D: serde::Serialize>(
    args: &DiffArgs,
    side: impl Fn(&Path, Option<u64>) -> crate::Result<S>,
    diff: impl Fn(S, S) -> D,
    render: impl Fn(&D) -> String,
    unchanged: impl Fn(&D) -> bool,
) -> ExitCode {
    let sides = match (&args.b, args.batches.as_deref()) {
        (Some(b), None) => side(&args.a, None).and_then(|x| Ok((x, side(b, None)?))),
        (None, Some([x, y])) => {
            side(&args.a, Some(*x)).and_then(|s| Ok((s, side(&args.a, Some(*y))?)))
        }
        _ => {
            eprintln!("error: give two checkpoints, or one checkpoint and --batches A B");
            return ExitCode::from(EXIT_INVALID);
        }
    };
    let (a, b) = match sides {
        Ok(s) => s,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let d = diff(a, b);
    if args.json {
        match serde_json::to_string_pretty(&d) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                report(&e);
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", render(&d));
    }
    if unchanged(&d) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
