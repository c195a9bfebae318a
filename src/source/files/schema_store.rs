//! The schema location of a file source: `<location>/_schemas/<version>`, where
//! the location is the checkpoint directory unless `schema_location` names another
//! directory (Auto Loader's `cloudFiles.schemaLocation`, which keeps its versions in
//! `_schemas/` the same way).
//!
//! Version 0 is written when the schema is first inferred (from the first
//! `schema_inference_max_files` files, oldest first, with the schema hints applied);
//! each later version is written by [`record_version`] when the schema evolves
//! (new fields under `schema_evolution = "add_new_columns"`) or the hints change.
//! Every start reads the latest version, so a restart never re-infers. A schema
//! given in the pipeline (`schema = "..."`) is used as is and not stored.
//!
//! File format (one JSON object after a version line, like Spark's logs); fields may
//! be added, never removed or renamed, and unknown fields are ignored on reading:
//!
//! ```text
//! v1
//! {"ddl":"id BIGINT, name STRING","createdAtMs":1764500000000,"reason":"inferred from 3 file(s)","files":["/l/a.json", ...]}
//! ```
//!
//! | field | meaning |
//! |---|---|
//! | `ddl` | the data schema as Spark DDL ([`crate::schema::to_ddl`]) |
//! | `createdAtMs` | when the version was written (ms since the epoch) |
//! | `reason` | why: `inferred from N file(s)`, `new fields coupon STRING (in /l/t3.json)`, ... |
//! | `files` | the files that caused it (the sampled files for version 0) |
//! | `added` | the field paths this version added (absent when none) |
//! | `partitionColumns` | the columns read from `key=value` directories (absent when none; [`super::partition`]) |
//!
//! A version file is written atomically and never overwritten.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::durable::{create_dir_private, write_atomic};
use crate::error::{Error, Result};
use crate::spec::FilesSource;

/// Name of the directory holding the versions, inside the schema location.
pub const SCHEMAS_DIR: &str = "_schemas";

/// One entry of the schema history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaVersion {
    pub ddl: String,
    pub created_at_ms: i64,
    pub reason: String,
    #[serde(default)]
    pub files: Vec<String>,
    /// Field paths added by this version ([`crate::schema::path_to_string`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    /// Columns whose values come from the files' `key=value` directories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_columns: Vec<String>,
}

impl SchemaVersion {
    /// The stored DDL parsed back, partition columns marked ([`super::partition::mark`]).
    pub fn schema(&self) -> std::result::Result<Schema, crate::schema::SchemaError> {
        crate::schema::parse_ddl(&self.ddl)
            .map(|s| super::partition::mark(s, &self.partition_columns))
    }
}

/// The versions directory of a schema location (`<location>/_schemas`). A path that
/// already is a `_schemas` directory is returned as is.
pub fn schemas_dir(location: &Path) -> PathBuf {
    if location.file_name().is_some_and(|n| n == SCHEMAS_DIR) {
        location.to_path_buf()
    } else {
        location.join(SCHEMAS_DIR)
    }
}

/// The schema location of a flow: `schema_location` when given, else the checkpoint.
pub fn location<'a>(checkpoint: &'a Checkpoint, schema_location: Option<&'a Path>) -> &'a Path {
    schema_location.unwrap_or_else(|| checkpoint.root())
}

/// The schema history in the checkpoint's own schema location, oldest first.
pub fn history(checkpoint: &Checkpoint) -> Result<Vec<(u64, SchemaVersion)>> {
    history_at(checkpoint.root())
}

/// The schema history of a schema location (or its `_schemas` directory), oldest
/// first; empty when nothing was recorded.
pub fn history_at(location: &Path) -> Result<Vec<(u64, SchemaVersion)>> {
    let dir = schemas_dir(location);
    let mut out = Vec::new();
    for id in Checkpoint::batch_ids(&dir)? {
        let path = dir.join(id.to_string());
        out.push((id, read_version(&path)?));
    }
    Ok(out)
}

fn read_version(path: &Path) -> Result<SchemaVersion> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::checkpoint(path, e.to_string()))?;
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("v1") {
        return Err(Error::checkpoint(
            path,
            "not a schema file (expected \"v1\" on line 1)",
        ));
    }
    lines
        .next()
        .ok_or_else(|| Error::checkpoint(path, "truncated schema file"))
        .and_then(|l| {
            serde_json::from_str(l)
                .map_err(|e| Error::checkpoint(path, format!("invalid schema entry: {e}")))
        })
}

/// The latest version and its schema, if any.
pub fn latest(location: &Path) -> Result<Option<(u64, Schema)>> {
    let Some((id, version)) = history_at(location)?.pop() else {
        return Ok(None);
    };
    let schema = version.schema().map_err(|e| {
        Error::checkpoint(
            schemas_dir(location).join(id.to_string()),
            format!("stored schema is invalid: {e}"),
        )
    })?;
    Ok(Some((id, schema)))
}

/// Records `schema` as the next version in `location` (the checkpoint directory or
/// the `schema_location`) and returns its number. Idempotent: when the latest
/// version already holds this schema, nothing is written and its number is returned
/// (a batch re-run after a crash records nothing twice).
pub fn record_version(
    location: &Path,
    schema: &Schema,
    reason: &str,
    files: &[String],
    added: &[String],
) -> Result<u64> {
    let dir = schemas_dir(location);
    let ddl = crate::schema::to_ddl(schema);
    let history = history_at(location)?;
    if let Some((id, latest)) = history.last()
        && latest.ddl == ddl
    {
        return Ok(*id);
    }
    // Partition columns as the schema marks them; a schema built without the marks
    // (an evolution) keeps the previous version's, when it still has those columns.
    let mut partition_columns = super::partition::marked_columns(schema);
    if partition_columns.is_empty()
        && let Some((_, latest)) = history.last()
        && latest
            .partition_columns
            .iter()
            .all(|c| schema.field_with_name(c).is_ok())
    {
        partition_columns = latest.partition_columns.clone();
    }
    let id = history.last().map_or(0, |(id, _)| id + 1);
    let version = SchemaVersion {
        ddl,
        created_at_ms: crate::clock::now_ms(),
        reason: reason.to_string(),
        files: files.to_vec(),
        added: added.to_vec(),
        partition_columns,
    };
    create_dir_private(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = dir.join(id.to_string());
    if path.exists() {
        return Err(Error::checkpoint(
            &path,
            "schema version exists already; another process is writing this schema location",
        ));
    }
    let text = format!(
        "v1\n{}",
        serde_json::to_string(&version).map_err(|e| Error::checkpoint(&dir, e.to_string()))?
    );
    write_atomic(&path, text.as_bytes()).map_err(|e| Error::unwritable(&path, e))?;
    tracing::info!(version = id, schema = %version.ddl, reason, "recorded a schema version");
    Ok(id)
}

/// The data schema of a file source in the checkpoint's own schema location, without hints.
pub fn resolve(spec: &FilesSource, checkpoint: &Checkpoint) -> Result<Option<SchemaRef>> {
    resolve_at(spec, checkpoint.root(), None)
}

/// The data schema of a file source: given (used as is), stored in `location`
/// (the latest version), or inferred now from the oldest files with `hints`
/// applied and recorded as version 0. `None` when it must be inferred and there
/// is no record to infer from yet.
///
/// With `hints`, a stored schema is re-hinted too: when the hints change what it
/// says (a type pinned differently, a hinted column added), the result is recorded
/// as a new version with the reason `schema hints changed`.
pub fn resolve_at(
    spec: &FilesSource,
    location: &Path,
    hints: Option<&str>,
) -> Result<Option<SchemaRef>> {
    if let Some(schema) = given(spec) {
        return Ok(Some(schema));
    }
    resolve_with(location, hints, &spec.path, || infer(spec))
}

/// The schema given in the pipeline (`schema = "..."`), with the `partition_columns`
/// marked (appended as STRING when the schema does not name them); `None` when inferred.
pub fn given(spec: &FilesSource) -> Option<SchemaRef> {
    let schema = spec.schema.as_ref()?;
    let columns = spec.partition_columns.clone().unwrap_or_default();
    if columns.is_empty() {
        return Some(schema.clone());
    }
    Some(Arc::new(super::partition::mark(
        schema.as_ref().clone(),
        &columns,
    )))
}

/// [`resolve_at`] for an inferred schema, with the inference given:
/// `infer` returns the schema and the sampled files, or `None` when there is no record yet.
pub fn resolve_with(
    location: &Path,
    hints: Option<&str>,
    source_path: &Path,
    infer: impl FnOnce() -> Result<Option<(Schema, Vec<String>)>>,
) -> Result<Option<SchemaRef>> {
    let hint = |schema: Schema| -> Result<Schema> {
        match hints {
            Some(h) => {
                // Hints rebuild fields; the partition marks are put back.
                let partitions = super::partition::marked_columns(&schema);
                crate::schema::apply_hints(schema, h)
                    .map(|s| super::partition::mark(s, &partitions))
                    .map_err(|e| Error::Source {
                        path: source_path.to_path_buf(),
                        message: format!("schema_hints: {e}"),
                    })
            }
            None => Ok(schema),
        }
    };
    if let Some((_, stored)) = latest(location)? {
        let hinted = hint(stored.clone())?;
        if let Some(h) = hints
            && crate::schema::to_ddl(&hinted) != crate::schema::to_ddl(&stored)
        {
            record_version(
                location,
                &hinted,
                &format!("schema hints changed: {h}"),
                &[],
                &[],
            )?;
        }
        return Ok(Some(Arc::new(hinted)));
    }
    let Some((schema, files)) = infer()? else {
        return Ok(None);
    };
    let schema = hint(schema)?;
    let mut reason = format!("inferred from {} file(s)", files.len());
    if let Some(h) = hints {
        reason.push_str(&format!("; schema hints: {h}"));
    }
    record_version(location, &schema, &reason, &files, &[])?;
    Ok(Some(Arc::new(schema)))
}

/// Infers the schema from the oldest `schema_inference_max_files` files, at most
/// `schema_inference_max_bytes` of them (at least one file).
pub(crate) fn infer(spec: &FilesSource) -> Result<Option<(Schema, Vec<String>)>> {
    let mut files = Vec::new();
    super::list_for_inference(spec, &mut files)?;
    if files.is_empty() {
        return Ok(None);
    }
    files.sort_by(|a, b| {
        a.modification_time_ms
            .cmp(&b.modification_time_ms)
            .then_with(|| a.path.cmp(&b.path))
    });
    files.truncate(spec.schema_inference_max_files);
    // The bytes bound: the oldest files up to it, at least one.
    let mut bytes = 0u64;
    let within = files
        .iter()
        .take_while(|f| {
            bytes = bytes.saturating_add(f.size);
            bytes <= spec.schema_inference_max_bytes
        })
        .count()
        .max(1);
    files.truncate(within);
    let metas: Vec<super::read::FileMeta> = files
        .iter()
        .map(|f| super::read::FileMeta {
            path: PathBuf::from(&f.path),
            size: f.size,
            modification_time_ms: f.modification_time_ms,
        })
        .collect();
    let remote = super::remote::Landing::of(&spec.path)?;
    match super::infer::infer_schema_in(
        &metas,
        spec.format,
        &spec.csv,
        &spec.text,
        spec.infer_column_types,
        remote.as_ref(),
    ) {
        Ok(schema) => {
            let paths: Vec<PathBuf> = metas.iter().map(|m| m.path.clone()).collect();
            let schema = super::partition::infer(
                schema,
                &spec.path,
                &paths,
                spec.partition_columns.as_deref(),
                spec.infer_column_types && spec.partition_column_type_inference,
            );
            Ok(Some((schema, files.into_iter().map(|f| f.path).collect())))
        }
        // Only empty or blank files so far: wait for data.
        Err(super::infer::InferError::NothingToInfer { .. }) => Ok(None),
        // The object store failed: source_unavailable, retried as a whole.
        Err(super::infer::InferError::File(super::read::FileReadError::Store {
            source, ..
        })) => Err(Error::Storage {
            role: crate::error::StorageRole::Source,
            source: *source,
        }),
        Err(e) => Err(Error::Source {
            path: spec.path.clone(),
            message: format!("schema inference failed: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{parse_ddl, to_ddl};

    fn schema(ddl: &str) -> Schema {
        parse_ddl(ddl).unwrap()
    }

    #[test]
    fn record_version_appends_and_is_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let location = tmp.path();
        assert!(history_at(location).unwrap().is_empty());
        assert!(latest(location).unwrap().is_none());
        let v0 = record_version(
            location,
            &schema("id BIGINT"),
            "inferred from 1 file(s)",
            &["/l/a.json".into()],
            &[],
        )
        .unwrap();
        assert_eq!(v0, 0);
        let v1 = record_version(
            location,
            &schema("id BIGINT, coupon STRING"),
            "new fields coupon STRING (in /l/t3.json)",
            &["/l/t3.json".into()],
            &["coupon".into()],
        )
        .unwrap();
        assert_eq!(v1, 1);
        // The same schema again (a re-run batch): no new version.
        let again = record_version(
            location,
            &schema("id BIGINT, coupon STRING"),
            "again",
            &[],
            &["coupon".into()],
        )
        .unwrap();
        assert_eq!(again, 1);
        let history = history_at(location).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[1].1.added, ["coupon"]);
        assert_eq!(history[1].1.files, ["/l/t3.json"]);
        assert!(history[1].1.created_at_ms > 0);
        let (id, latest) = latest(location).unwrap().unwrap();
        assert_eq!(
            (id, to_ddl(&latest)),
            (1, "id BIGINT, coupon STRING".into())
        );

        // The file format: a version line, then JSON; `added` only when not empty.
        let text = std::fs::read_to_string(location.join("_schemas/0")).unwrap();
        assert!(text.starts_with("v1\n{\"ddl\":\"id BIGINT\""), "{text}");
        assert!(!text.contains("added"), "{text}");
        let text = std::fs::read_to_string(location.join("_schemas/1")).unwrap();
        assert!(text.contains("\"added\":[\"coupon\"]"), "{text}");
        // The `_schemas` directory itself is accepted as the location.
        assert_eq!(history_at(&location.join("_schemas")).unwrap().len(), 2);
    }

    #[test]
    fn reads_files_written_before_added_existed_and_ignores_unknown_fields() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("_schemas");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("0"),
            "v1\n{\"ddl\":\"id BIGINT\",\"createdAtMs\":1,\"reason\":\"inferred from 1 file(s)\",\"files\":[\"/a\"]}",
        )
        .unwrap();
        std::fs::write(
            dir.join("1"),
            "v1\n{\"ddl\":\"id BIGINT, x STRING\",\"createdAtMs\":2,\"reason\":\"r\",\"future\":true}",
        )
        .unwrap();
        let history = history_at(tmp.path()).unwrap();
        assert_eq!(history.len(), 2);
        assert!(history[0].1.added.is_empty());
        assert!(history[1].1.files.is_empty());

        std::fs::write(dir.join("2"), "v2\n{}").unwrap();
        let err = history_at(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("_schemas/2"), "{err}");
    }

    #[test]
    fn resolve_infers_once_applies_hints_and_records_hint_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let location = tmp.path();
        let source = Path::new("/landing");
        // Nothing to infer from yet.
        assert!(
            resolve_with(location, None, source, || Ok(None))
                .unwrap()
                .is_none()
        );
        let inferred = || {
            Ok(Some((
                schema("id BIGINT, amount DOUBLE, ts STRING"),
                vec!["/landing/a.json".to_string()],
            )))
        };
        let hints = "amount DECIMAL(12,2), ts TIMESTAMP";
        let first = resolve_with(location, Some(hints), source, inferred)
            .unwrap()
            .unwrap();
        assert_eq!(
            to_ddl(&first),
            "id BIGINT, amount DECIMAL(12,2), ts TIMESTAMP"
        );
        let history = history_at(location).unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(
            history[0].1.reason,
            "inferred from 1 file(s); schema hints: amount DECIMAL(12,2), ts TIMESTAMP"
        );
        assert_eq!(history[0].1.files, ["/landing/a.json"]);
        // A restart reads the stored version and never infers again.
        let again = resolve_with(location, Some(hints), source, || panic!("inferred again"))
            .unwrap()
            .unwrap();
        assert_eq!(again, first);
        assert_eq!(history_at(location).unwrap().len(), 1);
        // Changed hints make a new version.
        let changed = resolve_with(location, Some("amount DECIMAL(14,2)"), source, || {
            panic!("inferred again")
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            to_ddl(&changed),
            "id BIGINT, amount DECIMAL(14,2), ts TIMESTAMP"
        );
        let history = history_at(location).unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(
            history[1].1.reason,
            "schema hints changed: amount DECIMAL(14,2)"
        );
        // Invalid hints are an error naming the source and the hint.
        let err = resolve_with(location, Some("id.x INT"), source, || Ok(None)).unwrap_err();
        assert!(
            err.to_string().contains("/landing") && err.to_string().contains("`id.x`"),
            "{err}"
        );
    }

    #[test]
    fn checkpoint_and_override_locations() {
        let tmp = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::at(tmp.path().join("cp"));
        let custom = tmp.path().join("schemas");
        assert_eq!(location(&checkpoint, None), checkpoint.root());
        assert_eq!(location(&checkpoint, Some(&custom)), custom.as_path());
        record_version(&custom, &schema("a INT"), "r", &[], &[]).unwrap();
        assert!(custom.join("_schemas/0").is_file());
        assert!(history(&checkpoint).unwrap().is_empty());
        record_version(checkpoint.root(), &schema("a INT"), "r", &[], &[]).unwrap();
        assert_eq!(history(&checkpoint).unwrap().len(), 1);
        assert_eq!(schemas_dir(checkpoint.root()), checkpoint.schemas_dir());
    }
}
