//! Where a flow writes.

use std::path::PathBuf;

/// Where a flow writes.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    Delta {
        path: PathBuf,
        partition_by: Vec<String>,
        merge_schema: bool,
        /// `false` (unsafe, drills only) skips the replay check of application transactions.
        idempotent: bool,
        /// A new checkpoint may write into a table that already has data (docs/sinks).
        allow_existing_table: bool,
        /// Delta's `delta.columnMapping.mode` for a table the sink creates: `name` or
        /// `id` store any column name (spaces, `(`, `=`, ...); `None`: no column mapping.
        column_mapping_mode: Option<ColumnMappingMode>,
        /// Delta table properties set when the sink creates the table (`table_properties`).
        table_properties: std::collections::BTreeMap<String, String>,
    },
    /// Delta MERGE on `keys` per batch (upsert), latest row per key within a batch.
    DeltaMerge {
        path: PathBuf,
        keys: Vec<String>,
        order_by: Option<String>,
        partition_by: Vec<String>,
        /// A new checkpoint may write into a table that already has data.
        allow_existing_table: bool,
        /// Keys match when both are null (`<=>`); by default `=` never matches a null key.
        null_safe_keys: bool,
        /// Delta table properties set when the sink creates the table (`table_properties`).
        table_properties: std::collections::BTreeMap<String, String>,
    },
    /// A PostgreSQL table (docs/sinks.md): each batch in one transaction with its marker
    /// row in `weir_sink_commits`; with `keys`, an upsert (`INSERT ... ON CONFLICT`).
    Postgres {
        /// The libpq URL as written (never with a password: refused when parsed).
        url: String,
        /// `name` or `schema.name`, each part as written (quoted in SQL).
        table: String,
        /// Upsert on these columns; empty: append.
        keys: Vec<String>,
        /// With `keys`: within a batch the row with the greatest value wins per key, and a
        /// table row is updated only by a row not older than it.
        order_by: Option<String>,
    },
    Memory {
        name: String,
    },
    Console {
        num_rows: usize,
    },
}

impl SinkSpec {
    /// Whether a new checkpoint may start over a table that already has rows.
    pub fn allows_existing_table(&self) -> bool {
        match self {
            SinkSpec::Delta {
                allow_existing_table,
                ..
            }
            | SinkSpec::DeltaMerge {
                allow_existing_table,
                ..
            } => *allow_existing_table,
            _ => true,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            SinkSpec::Delta { path, .. } => format!("DeltaSink[{}]", path.display()),
            SinkSpec::DeltaMerge { path, keys, .. } => {
                format!(
                    "DeltaMergeSink[{}, keys={}]",
                    path.display(),
                    keys.join(",")
                )
            }
            SinkSpec::Postgres {
                url, table, keys, ..
            } => {
                if keys.is_empty() {
                    format!("PostgresSink[{url}, table={table}]")
                } else {
                    format!(
                        "PostgresSink[{url}, table={table}, keys={}]",
                        keys.join(",")
                    )
                }
            }
            SinkSpec::Memory { name } => format!("MemorySink[{name}]"),
            SinkSpec::Console { .. } => "ConsoleSink".to_string(),
        }
    }
}

/// Delta's column mapping modes (`delta.columnMapping.mode`) a sink can create a table with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnMappingMode {
    /// Columns are stored under physical names (`col-<uuid>`); the logical name is free.
    Name,
    /// Columns are matched by field id.
    Id,
}

impl ColumnMappingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnMappingMode::Name => "name",
            ColumnMappingMode::Id => "id",
        }
    }

    /// `"name"`, `"id"` or `"none"` (no column mapping: `Ok(None)`).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "name" => Ok(Some(ColumnMappingMode::Name)),
            "id" => Ok(Some(ColumnMappingMode::Id)),
            "none" => Ok(None),
            other => Err(format!(
                "invalid column_mapping_mode {other:?}; allowed: \"name\", \"id\", \"none\" (Delta's delta.columnMapping.mode)"
            )),
        }
    }
}
