//! Schemas: DDL parsing, typed inference, rescued data.
//!
//! - [`parse_ddl`] / [`to_ddl`]: Spark-style DDL strings (`"id BIGINT, ts TIMESTAMP"`)
//!   to and from Arrow schemas ([`ddl`] documents the grammar and type mapping).
//! - [`infer_schema`]: Auto Loader's schema inference over sample files, typed
//!   (`inferColumnTypes = true`) or all strings ([`infer`] documents the rules).
//! - [`apply_hints`]: Auto Loader's schema hints, pinning some columns' types
//!   (also nested `a.b` paths) while the rest is inferred ([`hints`]).
//! - [`evolve`](evolve::evolve): what the fields a file has and the schema lacks do to
//!   the schema under each [`EvolutionMode`] ([`evolve`] documents the rules;
//!   `docs/schema.md` the whole story with Auto Loader references).
//! - [`SchemaEvent`]: typed drift events (`schema_changed`, `type_mismatch`,
//!   `sink_schema_mismatch`) ([`events`]).
//! - What happens to values that do not fit a schema (`_rescued_data`) is
//!   decided by the file decoders: see [`crate::source::files::read`].

pub mod ddl;
pub mod events;
pub mod evolve;
pub mod hints;
pub mod infer;

#[cfg(test)]
mod drift_tests;

use crate::source::files::read::FileReadError;

pub use ddl::{parse_ddl, to_ddl, type_to_ddl};
pub use events::SchemaEvent;
pub use evolve::{Decision, FieldMismatch, NewField, path_to_string};
pub use hints::apply_hints;
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
    /// A schema hint cannot be applied to the inferred schema.
    #[error("invalid schema hint `{hint}`: {message}")]
    Hint { hint: String, message: String },
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
            SchemaError::Ddl { .. } | SchemaError::Hint { .. } => false,
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
