//! `weir schema CHECKPOINT_OR_LOCATION [--json]`: the schema history of a file
//! source, read-only: each version with when and why it was recorded (the files,
//! the added fields), its DDL, and what changed from the version before.
//!
//! The argument is a flow's checkpoint directory, a `schema_location` directory,
//! or the `_schemas` directory inside either. Exit code 1 when there is no history
//! there or a version file cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use arrow::datatypes::{DataType, Fields};
use clap::Args;
use serde::Serialize;

use super::report;
use crate::schema::{path_to_string, type_to_ddl};
use crate::source::files::schema_store::{SchemaVersion, history_at, schemas_dir};

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// A flow's checkpoint directory, or its `schema_location`.
    pub location: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The history as `--json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaHistory {
    /// The `_schemas` directory read.
    pub location: PathBuf,
    pub versions: Vec<VersionReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionReport {
    pub version: u64,
    pub created_at_ms: i64,
    /// ISO-8601 UTC with milliseconds.
    pub created_at: String,
    pub reason: String,
    pub files: Vec<String>,
    pub added: Vec<String>,
    pub ddl: String,
    /// What changed from the previous version (everything is `added` for the first).
    pub diff: Vec<Change>,
}

/// One difference between consecutive versions, by field path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    Added {
        path: String,
        #[serde(rename = "type")]
        data_type: String,
    },
    Removed {
        path: String,
        #[serde(rename = "type")]
        data_type: String,
    },
    Changed {
        path: String,
        from: String,
        to: String,
    },
}

pub fn run(args: &SchemaArgs) -> ExitCode {
    match load(&args.location) {
        Ok(history) => {
            if args.json {
                match serde_json::to_string_pretty(&history) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        report(&e);
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", render_text(&history));
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the history at a checkpoint, schema location or `_schemas` directory.
pub fn load(location: &Path) -> Result<SchemaHistory, String> {
    let dir = schemas_dir(location);
    let history = history_at(location).map_err(|e| e.to_string())?;
    if history.is_empty() {
        return Err(format!(
            "no schema history at {}: the flow has not inferred a schema yet, its schema is \
             given in the pipeline, or the path is not a checkpoint or schema_location",
            dir.display()
        ));
    }
    let mut versions = Vec::with_capacity(history.len());
    let mut previous: Option<Fields> = None;
    for (version, entry) in history {
        let fields = entry.schema().map(|s| s.fields().clone()).map_err(|e| {
            format!(
                "{}: stored schema is invalid: {e}",
                dir.join(version.to_string()).display()
            )
        })?;
        let diff = diff(previous.as_ref().unwrap_or(&Fields::empty()), &fields);
        versions.push(report_of(version, entry, diff));
        previous = Some(fields);
    }
    Ok(SchemaHistory {
        location: dir,
        versions,
    })
}

fn report_of(version: u64, entry: SchemaVersion, diff: Vec<Change>) -> VersionReport {
    VersionReport {
        version,
        created_at_ms: entry.created_at_ms,
        created_at: crate::records::iso_millis(entry.created_at_ms),
        reason: entry.reason,
        files: entry.files,
        added: entry.added,
        ddl: entry.ddl,
        diff,
    }
}

/// The changes from `old` to `new`: struct fields are compared field by field, any
/// other type as a whole.
pub fn diff(old: &Fields, new: &Fields) -> Vec<Change> {
    let mut out = Vec::new();
    diff_into(old, new, &mut Vec::new(), &mut out);
    out
}

fn diff_into(old: &Fields, new: &Fields, path: &mut Vec<String>, out: &mut Vec<Change>) {
    let at = |path: &mut Vec<String>, name: &str| {
        path.push(name.to_string());
        let s = path_to_string(path);
        path.pop();
        s
    };
    for field in new {
        match old.find(field.name()) {
            None => out.push(Change::Added {
                path: at(path, field.name()),
                data_type: type_to_ddl(field.data_type()),
            }),
            Some((_, before)) => {
                path.push(field.name().clone());
                diff_types(before.data_type(), field.data_type(), path, out);
                path.pop();
            }
        }
    }
    for field in old {
        if new.find(field.name()).is_none() {
            out.push(Change::Removed {
                path: at(path, field.name()),
                data_type: type_to_ddl(field.data_type()),
            });
        }
    }
}

fn diff_types(old: &DataType, new: &DataType, path: &mut Vec<String>, out: &mut Vec<Change>) {
    match (old, new) {
        (DataType::Struct(a), DataType::Struct(b)) => diff_into(a, b, path, out),
        (DataType::List(a), DataType::List(b)) => {
            path.push("element".into());
            diff_types(a.data_type(), b.data_type(), path, out);
            path.pop();
        }
        (a, b) if type_to_ddl(a) != type_to_ddl(b) => out.push(Change::Changed {
            path: path_to_string(path),
            from: type_to_ddl(a),
            to: type_to_ddl(b),
        }),
        _ => {}
    }
}

/// The human form of a history.
pub fn render_text(history: &SchemaHistory) -> String {
    let mut out = format!(
        "schema history  {}  ({} version{})\n",
        history.location.display(),
        history.versions.len(),
        if history.versions.len() == 1 { "" } else { "s" }
    );
    for (i, v) in history.versions.iter().enumerate() {
        out.push_str(&format!(
            "\nversion {}  {}  {}\n",
            v.version, v.created_at, v.reason
        ));
        if !v.added.is_empty() {
            out.push_str(&format!("  added   {}\n", v.added.join(", ")));
        }
        match v.files.len() {
            0 => {}
            1..=5 => out.push_str(&format!("  files   {}\n", v.files.join(", "))),
            n => out.push_str(&format!(
                "  files   {}, ... ({n} files)\n",
                v.files[..3].join(", ")
            )),
        }
        // The first version's diff is the whole schema, which the `schema` line shows.
        if i > 0 {
            for change in &v.diff {
                out.push_str(&match change {
                    Change::Added { path, data_type } => format!("  + {path} {data_type}\n"),
                    Change::Removed { path, data_type } => format!("  - {path} {data_type}\n"),
                    Change::Changed { path, from, to } => format!("  ~ {path} {from} -> {to}\n"),
                });
            }
        }
        out.push_str(&format!("  schema  {}\n", v.ddl));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::parse_ddl;
    use crate::source::files::schema_store::record_version;

    #[test]
    fn history_with_diffs_text_and_json() {
        let tmp = tempfile::tempdir().unwrap();
        let cp = tmp.path();
        let v0 = parse_ddl("id BIGINT, meta STRUCT<src: STRING>, qty BIGINT").unwrap();
        record_version(
            cp,
            &v0,
            "inferred from 1 file(s)",
            &["/l/n1.json".into()],
            &[],
        )
        .unwrap();
        let v1 = parse_ddl(
            "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>, qty BIGINT, `order id` STRING",
        )
        .unwrap();
        record_version(
            cp,
            &v1,
            "new fields meta.ver BIGINT, `order id` STRING (in /l/n2.json)",
            &["/l/n2.json".into()],
            &["meta.ver".into(), "`order id`".into()],
        )
        .unwrap();
        let v2 = parse_ddl(
            "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>, qty DECIMAL(10,2), `order id` STRING",
        )
        .unwrap();
        record_version(cp, &v2, "schema hints changed: qty DECIMAL(10,2)", &[], &[]).unwrap();

        let history = load(cp).unwrap();
        assert_eq!(history.location, cp.join("_schemas"));
        assert_eq!(history.versions.len(), 3);
        assert_eq!(history.versions[0].diff.len(), 3);
        assert_eq!(
            history.versions[1].diff,
            [
                Change::Added {
                    path: "meta.ver".into(),
                    data_type: "BIGINT".into()
                },
                Change::Added {
                    path: "`order id`".into(),
                    data_type: "STRING".into()
                },
            ]
        );
        assert_eq!(
            history.versions[2].diff,
            [Change::Changed {
                path: "qty".into(),
                from: "BIGINT".into(),
                to: "DECIMAL(10,2)".into()
            }]
        );

        let text = render_text(&history);
        assert!(text.contains("(3 versions)"), "{text}");
        assert!(text.contains("version 1  "), "{text}");
        assert!(text.contains("  added   meta.ver, `order id`\n"), "{text}");
        assert!(text.contains("  files   /l/n2.json\n"), "{text}");
        assert!(text.contains("  + meta.ver BIGINT\n"), "{text}");
        assert!(text.contains("  ~ qty BIGINT -> DECIMAL(10,2)\n"), "{text}");
        assert!(
            text.contains("  schema  id BIGINT, meta STRUCT<src: STRING>, qty BIGINT\n"),
            "{text}"
        );
        assert!(
            !text.lines().take(4).any(|l| l.starts_with("  + ")),
            "version 0 shows no diff: {text}"
        );

        let json = serde_json::to_value(&history).unwrap();
        assert_eq!(json["versions"][1]["added"][0], "meta.ver");
        assert_eq!(json["versions"][1]["diff"][0]["change"], "added");
        assert_eq!(json["versions"][1]["diff"][0]["type"], "BIGINT");
        assert_eq!(json["versions"][2]["diff"][0]["change"], "changed");
        assert!(
            json["versions"][0]["createdAt"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
        // The `_schemas` directory itself works too.
        assert_eq!(load(&cp.join("_schemas")).unwrap(), history);
    }

    #[test]
    fn no_history_is_an_error_naming_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let err = load(tmp.path()).unwrap_err();
        assert!(
            err.contains("no schema history") && err.contains("_schemas"),
            "{err}"
        );
    }

    #[test]
    fn removed_and_nested_type_changes() {
        let old = parse_ddl("a INT, s STRUCT<x: INT, y: STRING>, l ARRAY<STRUCT<p: INT>>").unwrap();
        let new = parse_ddl("s STRUCT<x: BIGINT>, l ARRAY<STRUCT<p: INT, q: STRING>>").unwrap();
        assert_eq!(
            diff(old.fields(), new.fields()),
            [
                Change::Changed {
                    path: "s.x".into(),
                    from: "INT".into(),
                    to: "BIGINT".into()
                },
                Change::Removed {
                    path: "s.y".into(),
                    data_type: "STRING".into()
                },
                Change::Added {
                    path: "l.element.q".into(),
                    data_type: "STRING".into()
                },
                Change::Removed {
                    path: "a".into(),
                    data_type: "INT".into()
                },
            ]
        );
    }
}
