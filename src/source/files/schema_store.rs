//! The schema location of a file source: `<checkpoint>/_schemas/<version>`.
//!
//! Version 0 is written when the schema is first inferred (from the first
//! `schema_inference_max_files` files, oldest first) and every later start
//! reads the latest version, so a restart never re-infers. A schema given in
//! the pipeline (`schema = "..."`) is used as is and not stored.
//!
//! File format (one JSON object after a version line, like Spark's logs):
//!
//! ```text
//! v1
//! {"ddl":"id BIGINT, name STRING","createdAtMs":1764500000000,"reason":"inferred from 3 files","files":["/l/a.json", ...]}
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, create_dir_private, write_atomic};
use crate::error::{Error, Result};
use crate::pipeline::FilesSource;

/// One entry of the schema history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaVersion {
    pub ddl: String,
    pub created_at_ms: i64,
    pub reason: String,
    #[serde(default)]
    pub files: Vec<String>,
}

/// The schema history, oldest first.
pub fn history(checkpoint: &Checkpoint) -> Result<Vec<(u64, SchemaVersion)>> {
    let dir = checkpoint.schemas_dir();
    let mut out = Vec::new();
    for id in Checkpoint::batch_ids(&dir)? {
        let path = dir.join(id.to_string());
        let text = std::fs::read_to_string(&path).map_err(|e| Error::checkpoint(&path, e.to_string()))?;
        let mut lines = text.lines();
        if lines.next().map(str::trim) != Some("v1") {
            return Err(Error::checkpoint(&path, "not a schema file (expected \"v1\" on line 1)"));
        }
        let version: SchemaVersion = lines
            .next()
            .ok_or_else(|| Error::checkpoint(&path, "truncated schema file"))
            .and_then(|l| {
                serde_json::from_str(l).map_err(|e| Error::checkpoint(&path, format!("invalid schema entry: {e}")))
            })?;
        out.push((id, version));
    }
    Ok(out)
}

/// The data schema of a file source: given, stored, or inferred now (and stored).
/// `None` when it must be inferred and there is no file to infer from yet.
pub fn resolve(spec: &FilesSource, checkpoint: &Checkpoint) -> Result<Option<SchemaRef>> {
    if let Some(schema) = &spec.schema {
        return Ok(Some(schema.clone()));
    }
    if let Some((id, latest)) = history(checkpoint)?.pop() {
        let schema = crate::schema::parse_ddl(&latest.ddl).map_err(|e| {
            Error::checkpoint(checkpoint.schemas_dir().join(id.to_string()), format!("stored schema is invalid: {e}"))
        })?;
        return Ok(Some(Arc::new(schema)));
    }
    let mut files = Vec::new();
    super::list_for_inference(spec, &mut files)?;
    if files.is_empty() {
        return Ok(None);
    }
    files.sort_by(|a, b| a.modification_time_ms.cmp(&b.modification_time_ms).then_with(|| a.path.cmp(&b.path)));
    files.truncate(spec.schema_inference_max_files);
    let metas: Vec<super::read::FileMeta> = files
        .iter()
        .map(|f| super::read::FileMeta {
            path: PathBuf::from(&f.path),
            size: f.size,
            modification_time_ms: f.modification_time_ms,
        })
        .collect();
    let schema = match crate::schema::infer_schema(&metas, spec.format, &spec.csv, spec.infer_column_types) {
        Ok(schema) => schema,
        // Only empty or blank files so far: wait for data.
        Err(crate::schema::SchemaError::NothingToInfer { .. }) => return Ok(None),
        Err(e) => {
            return Err(Error::Source {
                path: spec.path.clone(),
                message: format!("schema inference failed: {e}"),
            });
        }
    };
    let version = SchemaVersion {
        ddl: crate::schema::to_ddl(&schema),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        reason: format!("inferred from {} file(s)", metas.len()),
        files: files.iter().map(|f| f.path.clone()).collect(),
    };
    let dir = checkpoint.schemas_dir();
    create_dir_private(&dir)?;
    let text = format!(
        "v1\n{}",
        serde_json::to_string(&version).map_err(|e| Error::checkpoint(&dir, e.to_string()))?
    );
    write_atomic(&dir.join("0"), text.as_bytes())?;
    tracing::info!(schema = %version.ddl, files = metas.len(), "inferred the source schema");
    Ok(Some(Arc::new(schema)))
}
