//! Schema inference over sample files (Auto Loader's schema inference): each sample
//! is read with the file source's own parsers (JSON lines, CSV with its dialect, a
//! Parquet footer) and its values typed and merged by the rules of
//! `crate::schema::infer` (documented there), so an inferred schema always reads its
//! own sample back.
//!
//! # Errors
//!
//! A sample file that cannot be read ([`FileReadError::Io`]) fails the inference
//! (retryable). A corrupt sample file (truncated gzip, bad footer) is skipped when
//! the other samples still give columns; otherwise its error is returned. When the
//! samples hold no column at all (0-byte or blank files) the result is
//! [`InferError::NothingToInfer`]. A CSV header alone is enough: its columns are
//! strings.

use std::sync::Arc;

use arrow::datatypes::Schema;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::read::{FileMeta, FileReadError, decode_contents, read_contents};
use crate::schema::infer::{ArrowFields, Rules, StructTy, Ty, classify, merge, normalize};
use crate::spec::{CsvOptions, FileFormat, TextOptions};

/// Why no schema could be inferred from the sample.
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// A sample file could not be read or decoded.
    #[error("schema inference: {0}")]
    File(#[from] FileReadError),
    /// The sample files hold no record to infer a schema from (all empty or blank).
    #[error(
        "cannot infer a schema: the {files} sampled file(s) hold no records; \
         wait for data or declare the schema"
    )]
    NothingToInfer { files: usize },
}

impl InferError {
    /// Whether trying again later can succeed without a change by a person.
    pub fn retryable(&self) -> bool {
        match self {
            InferError::File(e) => e.retryable(),
            InferError::NothingToInfer { .. } => true,
        }
    }
}

/// Infers the schema of `files` (see the module documentation and `crate::schema::infer` for the rules).
pub fn infer_schema(
    files: &[FileMeta],
    format: FileFormat,
    csv: &CsvOptions,
    text_options: &TextOptions,
    typed: bool,
) -> Result<Schema, InferError> {
    infer_schema_in(files, format, csv, text_options, typed, None)
}

/// [`infer_schema`] of files that are objects of `remote` (their paths are URLs), each
/// fetched whole; local files when `None`.
pub fn infer_schema_in(
    files: &[FileMeta],
    format: FileFormat,
    csv: &CsvOptions,
    text_options: &TextOptions,
    typed: bool,
    remote: Option<&super::remote::Landing>,
) -> Result<Schema, InferError> {
    let rules = Rules {
        timestamp_format: text_options.timestamps.format.as_ref(),
        csv: Some(csv),
        prefers_decimal: text_options.prefers_decimal && format == FileFormat::Json,
    };
    let mut corrupt = None;
    let schema = match format {
        FileFormat::Json | FileFormat::Csv => {
            let mut root = StructTy::default();
            for file in files {
                let read = match remote {
                    Some(landing) => landing.get_blocking(&file.path).and_then(|raw| {
                        decode_contents(
                            &file.path,
                            Vec::from(raw),
                            text_options.encoding,
                            text_options.max_file_bytes,
                        )
                    }),
                    None => read_contents(
                        &file.path,
                        text_options.encoding,
                        text_options.max_file_bytes,
                    ),
                };
                let text = match read {
                    Ok(text) => text,
                    Err(e @ FileReadError::Corrupt { .. }) => {
                        corrupt.get_or_insert(e);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                if format == FileFormat::Json {
                    absorb_json(&mut root, &text, typed, text_options, rules);
                } else {
                    absorb_csv(&mut root, &text, csv, typed, rules);
                }
            }
            Schema::new(root.into_fields())
        }
        FileFormat::Parquet => {
            let mut root = ArrowFields::default();
            for file in files {
                let schema = match remote {
                    Some(landing) => landing.get_blocking(&file.path).and_then(|bytes| {
                        super::read::parquet_file::guarded(&file.path, || {
                            parquet_schema_of(&file.path, bytes)
                        })
                    }),
                    None => parquet_schema(file),
                };
                match schema {
                    Ok(Some(schema)) => {
                        for field in schema.fields() {
                            root.add(field.name(), normalize(field.data_type()));
                        }
                    }
                    Ok(None) => {}
                    Err(e @ FileReadError::Corrupt { .. }) => {
                        corrupt.get_or_insert(e);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Schema::new(root.into_fields())
        }
    };
    if schema.fields().is_empty() {
        return Err(match corrupt {
            Some(e) => e.into(),
            None => InferError::NothingToInfer { files: files.len() },
        });
    }
    Ok(schema)
}

fn absorb_json(
    root: &mut StructTy,
    text: &[u8],
    typed: bool,
    options: &TextOptions,
    rules: Rules<'_>,
) {
    use super::read::json_lines::parse_line;
    for line in text.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if options
            .max_record_bytes
            .is_some_and(|max| line.len() as u64 > max)
        {
            continue;
        }
        // With prefers_decimal, numbers are read as their literal text (exact digits).
        let Ok(parsed) = parse_line(
            line,
            options.allow_non_numeric_numbers,
            rules.prefers_decimal,
        ) else {
            continue;
        };
        let mut object = parsed.object;
        if parsed.invalid_utf8 {
            // Fields holding bytes that are not UTF-8 are rescued when read; their type is unknown.
            use super::read::json_lines::{has_raw_bytes, value_has_raw_bytes};
            object.retain(|k, v| !has_raw_bytes(k) && !value_has_raw_bytes(v));
        }
        if typed {
            root.absorb_object(&object, rules);
        } else {
            for key in object.keys() {
                root.slot(key);
            }
        }
    }
}

fn absorb_csv(
    root: &mut StructTy,
    text: &[u8],
    options: &CsvOptions,
    typed: bool,
    rules: Rules<'_>,
) {
    let mut reader = super::read::csv_reader_builder(options).from_reader(text);
    let mut record = csv::ByteRecord::new();
    // File field index -> root field index (None: a case variant or a repeated name).
    let mut slots: Vec<Option<usize>> = Vec::new();
    if options.header {
        match reader.read_byte_record(&mut record) {
            Ok(true) => {
                let names: Vec<String> = record
                    .iter()
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .collect();
                let names = super::read::safe_header(&names, options.null_value.as_deref());
                for name in names {
                    let repeated = slots.iter().flatten().any(|&i| root.fields[i].0 == name);
                    slots.push(if repeated { None } else { root.slot(&name) });
                }
            }
            Ok(false) | Err(_) => return,
        }
    }
    let null_value = options.null_value.as_deref().map(str::as_bytes);
    while let Ok(true) = reader.read_byte_record(&mut record) {
        if !options.header {
            while slots.len() < record.len() {
                let name = format!("_c{}", slots.len());
                slots.push(root.slot(&name));
            }
        }
        if !typed {
            continue;
        }
        for (field, slot) in record.iter().zip(&slots) {
            let Some(i) = *slot else { continue };
            if field.is_empty() || Some(field) == null_value {
                continue;
            }
            let ty = &mut root.fields[i].1;
            if *ty == Ty::Str {
                continue;
            }
            let Ok(s) = std::str::from_utf8(field) else {
                continue;
            };
            let current = std::mem::take(ty);
            *ty = merge(current, classify(s, rules));
        }
    }
}

/// The Arrow schema of a Parquet file from its footer; `None` for a 0-byte file.
fn parquet_schema(file: &FileMeta) -> Result<Option<Arc<Schema>>, FileReadError> {
    super::read::parquet_file::guarded(&file.path, || parquet_schema_unguarded(file))
}

/// [`parquet_schema`] of an object's bytes.
fn parquet_schema_of(
    path: &std::path::Path,
    bytes: bytes::Bytes,
) -> Result<Option<Arc<Schema>>, FileReadError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| FileReadError::Corrupt {
            path: path.to_path_buf(),
            message: format!("Parquet: {e}"),
        })?;
    Ok(Some(Arc::clone(builder.schema())))
}

fn parquet_schema_unguarded(file: &FileMeta) -> Result<Option<Arc<Schema>>, FileReadError> {
    let io = |source| FileReadError::Io {
        path: file.path.clone(),
        source,
    };
    let handle = std::fs::File::open(&file.path).map_err(io)?;
    if handle.metadata().map_err(io)?.len() == 0 {
        return Ok(None);
    }
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(handle).map_err(|e| FileReadError::Corrupt {
            path: file.path.clone(),
            message: format!("Parquet: {e}"),
        })?;
    Ok(Some(Arc::clone(builder.schema())))
}
