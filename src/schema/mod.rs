//! Schemas: DDL parsing, typed inference, rescued data.
//!
//! - [`parse_ddl`] / [`to_ddl`]: Spark-style DDL strings (`"id BIGINT, ts TIMESTAMP"`)
//!   to and from Arrow schemas ([`ddl`] documents the grammar and type mapping).
//! - [`infer_schema`]: Auto Loader's schema inference over sample files, typed
//!   (`inferColumnTypes = true`) or all strings ([`infer`] documents the rules).
//! - What happens to values that do not fit a schema (`_rescued_data`) is
//!   decided by the file decoders: see [`crate::source::files::read`].

pub mod ddl;
pub mod infer;

use crate::source::files::read::FileReadError;

pub use ddl::{parse_ddl, to_ddl, type_to_ddl};
pub use infer::infer_schema;

/// Why a schema could not be parsed or inferred.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A DDL schema string is invalid.
    #[error("invalid schema DDL at position {position}{}: {message}", column_suffix(.column))]
    Ddl {
        /// Byte offset in the DDL string.
        position: usize,
        /// The column being parsed (`meta.src` inside a struct), when known.
        column: Option<String>,
        message: String,
    },
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

impl SchemaError {
    /// Whether trying again later can succeed without a change by a person.
    pub fn retryable(&self) -> bool {
        match self {
            SchemaError::Ddl { .. } => false,
            SchemaError::File(e) => e.retryable(),
            SchemaError::NothingToInfer { .. } => true,
        }
    }
}

fn column_suffix(column: &Option<String>) -> String {
    match column {
        Some(c) => format!(" (column `{c}`)"),
        None => String::new(),
    }
}
