//! Options of the file source that the decoders need, shared by the pipeline
//! spec and the readers.

use serde::Serialize;

/// File format of a file source (Auto Loader's `cloudFiles.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// Newline-delimited JSON (JSON lines), one object per line.
    Json,
    /// Delimited text with an optional header line.
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl FileFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::Json => "json",
            FileFormat::Csv => "csv",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// CSV dialect. Defaults follow Spark's CSV reader: header on, `,`, `"`, `\`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CsvOptions {
    /// The first line names the columns; columns are matched to the schema by name per file.
    pub header: bool,
    pub delimiter: u8,
    pub quote: u8,
    /// Escape character inside quoted fields; `None` means quotes are doubled (RFC 4180).
    pub escape: Option<u8>,
    /// A field equal to this string is null (e.g. `NA`). The empty field is always null.
    pub null_value: Option<String>,
    /// Lines starting with this byte are skipped.
    pub comment: Option<u8>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            header: true,
            delimiter: b',',
            quote: b'"',
            escape: None,
            null_value: None,
            comment: None,
        }
    }
}

/// Name of the column that holds fields that did not fit the schema (Auto Loader's name).
pub const RESCUED_DATA_COLUMN: &str = "_rescued_data";
