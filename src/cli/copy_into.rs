//! `weir copy-into TABLE --from PATH --format csv|json|parquet [--pattern GLOB]
//! [--schema DDL] [--format-option KEY=VALUE]... [--force] [--validate N]`: a one-shot,
//! idempotent load into a Delta table, as Databricks' `COPY INTO` (docs/copy-into.md).
//!
//! Exit codes: 0 loaded (or nothing new to load, or validated); 1 the load failed and
//! nothing was written; 2 invalid options (named).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::{EXIT_INVALID, init_logging, report, runtime};
use crate::copy_into::{CopyInto, CopyIntoError, LoadReport, ValidateReport};
use crate::spec::FileFormat;

#[derive(Debug, Args)]
pub struct CopyIntoArgs {
    /// The Delta table to load into (a directory; created when absent).
    pub table: PathBuf,
    /// The directory (or file) to load from (Databricks' `FROM`).
    #[arg(long, required = true)]
    pub from: PathBuf,
    /// The files' format (Databricks' `FILEFORMAT`).
    #[arg(long, value_enum)]
    pub format: Format,
    /// A glob over the file names and their paths below --from (Databricks' `PATTERN`).
    #[arg(long)]
    pub pattern: Option<String>,
    /// The columns as a Spark DDL string (default: the table's, else inferred).
    #[arg(long)]
    pub schema: Option<String>,
    /// A reader option, as Databricks' `FORMAT_OPTIONS` names it (`header=true`,
    /// `sep=;`, `nullValue=NA`, ...); repeatable.
    #[arg(long = "format-option", value_name = "KEY=VALUE", value_parser = parse_option)]
    pub format_options: Vec<(String, String)>,
    /// Load every file again, loaded before or not (Databricks' `COPY_OPTIONS ('force' = 'true')`).
    #[arg(long)]
    pub force: bool,
    /// Parse up to N rows, report the schema, the rows and any malformed row, and write
    /// nothing (Databricks' `VALIDATE N ROWS`).
    #[arg(long, value_name = "N")]
    pub validate: Option<u64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Csv,
    Json,
    Parquet,
}

impl From<Format> for FileFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Csv => FileFormat::Csv,
            Format::Json => FileFormat::Json,
            Format::Parquet => FileFormat::Parquet,
        }
    }
}

fn parse_option(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE (e.g. header=true)")),
    }
}

pub fn run(args: &CopyIntoArgs) -> ExitCode {
    init_logging();
    let copy = CopyInto {
        table: args.table.clone(),
        from: args.from.clone(),
        format: args.format.into(),
        pattern: args.pattern.clone(),
        schema: args.schema.clone(),
        format_options: args.format_options.clone(),
        force: args.force,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            report(&e);
            return ExitCode::FAILURE;
        }
    };
    let outcome = match args.validate {
        Some(n) => rt
            .block_on(crate::copy_into::validate(&copy, n))
            .map(|r| print_validate(&copy, &r, args.json)),
        None => rt
            .block_on(crate::copy_into::load(&copy))
            .map(|r| print_load(&copy, &r, args.json)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&copy, &e),
    }
}

fn fail(copy: &CopyInto, e: &CopyIntoError) -> ExitCode {
    if e.is_usage() {
        eprintln!("error: weir copy-into {}: {e}", copy.table.display());
        return ExitCode::from(EXIT_INVALID);
    }
    eprintln!(
        "error: weir copy-into {}: the load failed",
        copy.table.display()
    );
    report(e);
    ExitCode::FAILURE
}

fn print_load(copy: &CopyInto, r: &LoadReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    let Some(load) = r.load else {
        println!(
            "COPY INTO {}: nothing to load ({} file(s) loaded before; --force loads them again)",
            copy.table.display(),
            r.files_skipped
        );
        return;
    };
    println!(
        "COPY INTO {}: load {load}: {} file(s), {} row(s) ({} rescued, {} corrupt record(s)), Delta version {}{}; {} file(s) loaded before skipped",
        copy.table.display(),
        r.files.len(),
        r.num_rows,
        r.num_rows_rescued,
        r.num_records_corrupt,
        r.delta_version.map_or("-".into(), |v| v.to_string()),
        if r.recovered {
            " (committed by an interrupted run; recorded now)"
        } else {
            ""
        },
        r.files_skipped,
    );
    println!("  schema: {}", r.schema);
}

fn print_validate(copy: &CopyInto, r: &ValidateReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    println!(
        "COPY INTO {} VALIDATE: {} file(s) to load; {} row(s) parsed, {} with rescued values, {} malformed; nothing written",
        copy.table.display(),
        r.files,
        r.rows_parsed,
        r.rows_rescued,
        r.rows_malformed
    );
    if !r.schema.is_empty() {
        println!("  schema: {}", r.schema);
    }
    for p in &r.problems {
        println!("  _rescued_data: {p}");
    }
}
