//! Schemas: DDL parsing, typed inference, rescued data.
//!
//! - [`parse_ddl`] / [`to_ddl`]: Spark-style DDL strings (`"id BIGINT, ts TIMESTAMP"`)
//!   to and from Arrow schemas ([`ddl`] documents the grammar and type mapping).
//! - [`infer`]: the typing rules of Auto Loader's schema inference, typed
//!   (`inferColumnTypes = true`) or all strings; the file source applies them to its
//!   sample files (`crate::source::files::infer`).
//! - [`apply_hints`]: Auto Loader's schema hints, pinning some columns' types
//!   (also nested `a.b` paths) while the rest is inferred ([`hints`]).
//! - [`evolve`](evolve::evolve): what the fields a file has and the schema lacks do to
//!   the schema under each [`EvolutionMode`] ([`evolve`] documents the rules;
//!   `docs/schema.md` the whole story with Auto Loader references).
//! - [`SchemaEvent`]: typed drift events (`schema_changed`, `type_mismatch`,
//!   `sink_schema_mismatch`) ([`events`]).
//! - The columns a source adds to its data: [`RESCUED_DATA_COLUMN`] (values that do
//!   not fit the schema; which ones is decided by the file decoders,
//!   `crate::source::files::read`) and [`METADATA_COLUMN`] (the file a row came from).
//!
//! Imports nothing of weir above the spec and the error types: the sources, the
//! operators and the sinks all build on it.

pub mod ddl;
pub mod events;
pub mod evolve;
pub mod hints;
pub mod infer;

#[cfg(test)]
mod tests;

pub use ddl::{parse_ddl, to_ddl, type_to_ddl};
pub use events::SchemaEvent;
pub use evolve::{Decision, FieldMismatch, NewField, path_to_string};
pub use hints::apply_hints;

/// Name of the column that holds fields that did not fit the schema (Auto Loader's name).
pub const RESCUED_DATA_COLUMN: &str = "_rescued_data";

/// Name of the hidden file-metadata column (Spark's `_metadata`): `file_path`,
/// `file_name`, `file_size`, `file_modification_time` of the row's source file.
pub const METADATA_COLUMN: &str = "_metadata";

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
    /// A schema hint cannot be applied to the inferred schema.
    #[error("invalid schema hint `{hint}`: {message}")]
    Hint { hint: String, message: String },
}

impl SchemaError {
    /// Whether trying again later can succeed without a change by a person.
    pub fn retryable(&self) -> bool {
        match self {
            SchemaError::Ddl { .. } | SchemaError::Hint { .. } => false,
        }
    }
}

fn column_suffix(column: &Option<String>) -> String {
    match column {
        Some(c) => format!(" (column `{c}`)"),
        None => String::new(),
    }
}
