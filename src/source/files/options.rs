//! Options of the file source that the decoders need, shared by the pipeline
//! spec and the readers.

/// Name of the column that holds fields that did not fit the schema (Auto Loader's name).
pub const RESCUED_DATA_COLUMN: &str = "_rescued_data";
