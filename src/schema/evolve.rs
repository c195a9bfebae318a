//! Schema evolution: what happens when a file shows fields the schema lacks
//! (Auto Loader's `cloudFiles.schemaEvolutionMode`). Rules and references:
//! `docs/schema.md`.
//!
//! The decoders report, per file, the fields that are not in the schema
//! ([`NewField`], with the type the typed-inference rules of [`crate::schema::infer`]
//! give their values) and the values of known fields that did not fit their type
//! ([`FieldMismatch`]); every such value is in `_rescued_data` whatever happens
//! here. [`evolve`] then decides, for one batch:
//!
//! | mode | new fields | type mismatches |
//! |---|---|---|
//! | `add_new_columns` (default when no schema is given) | [`Decision::Widen`]: appended at the end of the schema, nested fields at the end of their struct | never widen; values stay rescued |
//! | `rescue` | [`Decision::Unchanged`]: values stay in `_rescued_data` | same |
//! | `fail_on_new_columns` | [`Decision::Fail`] naming the fields and files | same |
//! | `none` (default when a schema is given) | [`Decision::Unchanged`]: ignored (the values are still in `_rescued_data`) | same |
//!
//! Before a mode applies, the reported fields are narrowed by [`additions`]:
//!
//! - a field that is null in every value seen so far is **not** added (a Delta
//!   table cannot take a void column, and its type is unknown); it is reported
//!   again, typed, by the first file that holds a value for it;
//! - a field whose name differs from an existing field only by letter case is
//!   never added (Delta is case-insensitive; the value stays rescued under its
//!   own spelling), and between two new spellings the first reported wins;
//! - a nested field is added only where its parent is a struct (`meta.ver` into
//!   `meta STRUCT<src>`; `items.element.x` into `items ARRAY<STRUCT<...>>`;
//!   `m.value.x` into a map's struct values); under a parent of another type
//!   the values are type mismatches, not new fields;
//! - `_rescued_data` and `_metadata` at the top level are the reader's own columns
//!   and are never added (a file's fields of those names stay rescued);
//! - the same field reported by several files is added once, with the types
//!   merged by the inference rules (`BIGINT` and `DOUBLE` give `DOUBLE`; any
//!   other disagreement gives `STRING`).
//!
//! A type change of an existing field (a string where a number was inferred, a
//! double in a `BIGINT` column) never changes the schema: Auto Loader's
//! `addNewColumns` does not widen types either. The values are rescued and
//! reported as `type_mismatch` events ([`crate::schema::events::SchemaEvent`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};

use super::ddl::{quote_name, type_to_ddl};
use super::infer::{finish_type, merge_types};
use crate::spec::EvolutionMode;

/// A field present in a file and absent from the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct NewField {
    /// Names from the top level down (`["meta", "ver"]`). A literal dotted name is
    /// one element (`["geo.lat"]`); `element` steps into a list's items and
    /// `value` into a map's values.
    pub path: Vec<String>,
    /// The type inferred from the file's values; [`DataType::Null`] when every value was null.
    pub data_type: DataType,
    /// The file, as written in `_rescued_data`'s `_file_path`.
    pub file: String,
}

impl NewField {
    /// The path as text: `meta.ver`, `` `geo.lat` `` (see [`path_to_string`]).
    pub fn path_string(&self) -> String {
        path_to_string(&self.path)
    }
}

/// Values of one known field of one file that did not fit its type (all rescued).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldMismatch {
    /// As in [`NewField::path`].
    pub path: Vec<String>,
    pub file: String,
    /// Values rescued (a list or map rescued whole counts once).
    pub count: usize,
    /// The schema's type.
    pub expected: DataType,
    /// The inferred type of the rescued values (`STRING` for text that is not a number, ...).
    pub found: DataType,
}

impl FieldMismatch {
    pub fn path_string(&self) -> String {
        path_to_string(&self.path)
    }
}

/// What a batch's new fields do to the schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Keep the schema (no addable field, or the mode does not evolve).
    Unchanged,
    /// Record `schema` as the next version; the batch is read again with it.
    Widen {
        /// The current schema with the new fields appended.
        schema: Schema,
        /// The added fields' paths ([`path_to_string`]), in the order they were appended.
        added: Vec<String>,
        /// The files that showed them, first appearance first.
        files: Vec<String>,
        /// One line for the schema history: the fields with their types, and the files.
        reason: String,
    },
    /// Stop the flow (`fail_on_new_columns`).
    Fail { message: String },
}

/// Decides what `new_fields` (from the decoders, any number of files, in file
/// order) do to `current` under `mode` (see the module documentation).
pub fn evolve(current: &Schema, new_fields: &[NewField], mode: EvolutionMode) -> Decision {
    let additions = additions(current, new_fields);
    if additions.is_empty() {
        return Decision::Unchanged;
    }
    match mode {
        EvolutionMode::Rescue | EvolutionMode::None => Decision::Unchanged,
        EvolutionMode::FailOnNewColumns => Decision::Fail {
            message: format!(
                "new fields not in the schema (schema_evolution = \"fail_on_new_columns\"): {}; \
                 their values are in _rescued_data. Declare them in `schema` or `schema_hints`, \
                 or set schema_evolution = \"add_new_columns\" (evolve the schema) or \"rescue\" \
                 (keep them in _rescued_data)",
                describe(&additions)
            ),
        },
        EvolutionMode::AddNewColumns => {
            let mut fields = current.fields().clone();
            let mut added = Vec::with_capacity(additions.len());
            for field in &additions {
                fields = insert(&fields, &field.path, &field.data_type);
                added.push(field.path_string());
            }
            let mut files: Vec<String> = Vec::new();
            for field in &additions {
                if !files.contains(&field.file) {
                    files.push(field.file.clone());
                }
            }
            Decision::Widen {
                schema: Schema::new_with_metadata(fields, current.metadata().clone()),
                added,
                files,
                reason: format!("new fields {}", describe(&additions)),
            }
        }
    }
}

/// The fields of `new_fields` that `add_new_columns` would add to `current`, merged
/// across files, in first-appearance order (rules in the module documentation).
/// Useful in every mode, e.g. to count what `none` ignores.
pub fn additions(current: &Schema, new_fields: &[NewField]) -> Vec<NewField> {
    let mut out: Vec<NewField> = Vec::new();
    let mut exact: HashMap<&[String], usize> = HashMap::new();
    let mut folded: HashSet<Vec<String>> = HashSet::new();
    for field in new_fields {
        if field.data_type == DataType::Null || field.path.is_empty() {
            continue;
        }
        if field.path.len() == 1 && RESERVED.contains(&field.path[0].as_str()) {
            continue;
        }
        if locate(current.fields(), &field.path) != Slot::Insertable {
            continue;
        }
        if let Some(&i) = exact.get(field.path.as_slice()) {
            let merged = merge_types(out[i].data_type.clone(), field.data_type.clone());
            out[i].data_type = merged;
            continue;
        }
        if !folded.insert(field.path.iter().map(|s| s.to_lowercase()).collect()) {
            continue;
        }
        exact.insert(&field.path, out.len());
        out.push(field.clone());
    }
    for field in &mut out {
        field.data_type = finish_type(std::mem::replace(&mut field.data_type, DataType::Null));
    }
    out
}

/// New fields as all-strings inference types them (`infer_column_types = false`):
/// every non-null type becomes `STRING` (a JSON object or array is read as its text).
pub fn strings_only(new_fields: &[NewField]) -> Vec<NewField> {
    new_fields
        .iter()
        .map(|f| NewField {
            data_type: if f.data_type == DataType::Null {
                DataType::Null
            } else {
                DataType::Utf8
            },
            ..f.clone()
        })
        .collect()
}

/// Top-level names the reader adds itself: a file's own field of that name stays
/// rescued and is never added as a data column.
const RESERVED: [&str; 2] = [
    crate::schema::RESCUED_DATA_COLUMN,
    crate::schema::METADATA_COLUMN,
];

/// A field path as text: names joined by `.`, each back-quoted when it is not a
/// plain identifier (`` `geo.lat` `` is one column, `geo.lat` is `lat` inside `geo`).
pub fn path_to_string(path: &[String]) -> String {
    let mut out = String::new();
    for (i, name) in path.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        out.push_str(&quote_name(name));
    }
    out
}

/// The type at `path` in `schema` (exact names; `element` / `value` step into lists and maps).
pub fn type_at<'a>(schema: &'a Schema, path: &[String]) -> Option<&'a DataType> {
    let (first, rest) = path.split_first()?;
    let field = schema.fields().iter().find(|f| f.name() == first)?;
    type_below(field.data_type(), rest)
}

fn type_below<'a>(data_type: &'a DataType, path: &[String]) -> Option<&'a DataType> {
    let Some((first, rest)) = path.split_first() else {
        return Some(data_type);
    };
    match data_type {
        DataType::Struct(fields) => {
            let field = fields.iter().find(|f| f.name() == first)?;
            type_below(field.data_type(), rest)
        }
        DataType::List(item) | DataType::LargeList(item) if first == "element" => {
            type_below(item.data_type(), rest)
        }
        DataType::Map(entries, _) if first == "value" => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => type_below(kv[1].data_type(), rest),
            _ => None,
        },
        _ => None,
    }
}

/// `a BIGINT, meta.ver BIGINT (in /l/a.json, /l/b.json)`.
fn describe(fields: &[NewField]) -> String {
    let mut files: Vec<&str> = Vec::new();
    for field in fields {
        if !files.contains(&field.file.as_str()) {
            files.push(&field.file);
        }
    }
    let list: Vec<String> = fields
        .iter()
        .map(|f| format!("{} {}", f.path_string(), type_to_ddl(&f.data_type)))
        .collect();
    format!("{} (in {})", list.join(", "), files.join(", "))
}

/// Where a path falls in a schema.
#[derive(Debug, PartialEq, Eq)]
enum Slot {
    /// The field exists.
    Present,
    /// A field with the same name ignoring case exists at that level.
    CaseVariant,
    /// The parent exists and is a struct without the field.
    Insertable,
    /// The parent is missing, or is not a struct.
    NoParent,
}

fn locate(fields: &Fields, path: &[String]) -> Slot {
    let Some((first, rest)) = path.split_first() else {
        return Slot::Present;
    };
    match fields.iter().find(|f| f.name() == first) {
        Some(field) => locate_below(field.data_type(), rest),
        None if fields
            .iter()
            .any(|f| f.name().to_lowercase() == first.to_lowercase()) =>
        {
            Slot::CaseVariant
        }
        None if rest.is_empty() => Slot::Insertable,
        None => Slot::NoParent,
    }
}

fn locate_below(data_type: &DataType, path: &[String]) -> Slot {
    let Some((first, rest)) = path.split_first() else {
        return Slot::Present;
    };
    match data_type {
        DataType::Struct(fields) => locate(fields, path),
        DataType::List(item) | DataType::LargeList(item) if first == "element" => {
            locate_below(item.data_type(), rest)
        }
        DataType::Map(entries, _) if first == "value" => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => locate_below(kv[1].data_type(), rest),
            _ => Slot::NoParent,
        },
        _ => Slot::NoParent,
    }
}

/// `fields` with a nullable field of `data_type` appended at `path` (whose parent exists).
fn insert(fields: &Fields, path: &[String], data_type: &DataType) -> Fields {
    let Some((first, rest)) = path.split_first() else {
        return fields.clone();
    };
    if rest.is_empty() {
        let mut out: Vec<FieldRef> = fields.iter().cloned().collect();
        out.push(Arc::new(Field::new(first, data_type.clone(), true)));
        return Fields::from(out);
    }
    fields
        .iter()
        .map(|field| {
            if field.name() == first {
                let inner = insert_below(field.data_type(), rest, data_type);
                Arc::new(field.as_ref().clone().with_data_type(inner))
            } else {
                Arc::clone(field)
            }
        })
        .collect()
}

fn insert_below(parent: &DataType, path: &[String], data_type: &DataType) -> DataType {
    let Some((first, rest)) = path.split_first() else {
        return parent.clone();
    };
    match parent {
        DataType::Struct(fields) => DataType::Struct(insert(fields, path, data_type)),
        DataType::List(item) if first == "element" => DataType::List(Arc::new(
            item.as_ref()
                .clone()
                .with_data_type(insert_below(item.data_type(), rest, data_type)),
        )),
        DataType::LargeList(item) if first == "element" => DataType::LargeList(Arc::new(
            item.as_ref()
                .clone()
                .with_data_type(insert_below(item.data_type(), rest, data_type)),
        )),
        DataType::Map(entries, sorted) if first == "value" => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let value = kv[1].as_ref().clone().with_data_type(insert_below(
                    kv[1].data_type(),
                    rest,
                    data_type,
                ));
                let kv = Fields::from(vec![kv[0].as_ref().clone(), value]);
                DataType::Map(
                    Arc::new(
                        entries
                            .as_ref()
                            .clone()
                            .with_data_type(DataType::Struct(kv)),
                    ),
                    *sorted,
                )
            }
            _ => parent.clone(),
        },
        _ => parent.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{parse_ddl, to_ddl};
    use crate::spec::EvolutionMode;

    fn nf(path: &[&str], ddl_type: &str, file: &str) -> NewField {
        let data_type = if ddl_type == "NULL" {
            DataType::Null
        } else {
            parse_ddl(&format!("x {ddl_type}"))
                .unwrap()
                .field(0)
                .data_type()
                .clone()
        };
        NewField {
            path: path.iter().map(|s| s.to_string()).collect(),
            data_type,
            file: file.into(),
        }
    }

    fn widen(current: &str, fields: &[NewField]) -> (String, Vec<String>, Vec<String>, String) {
        match evolve(
            &parse_ddl(current).unwrap(),
            fields,
            EvolutionMode::AddNewColumns,
        ) {
            Decision::Widen {
                schema,
                added,
                files,
                reason,
            } => (to_ddl(&schema), added, files, reason),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn add_new_columns_appends_top_level_and_nested_fields() {
        let (ddl, added, files, reason) = widen(
            "id BIGINT, meta STRUCT<src: STRING>",
            &[
                nf(&["meta", "ver"], "BIGINT", "/l/b.json"),
                nf(&["coupon"], "STRING", "/l/c.json"),
            ],
        );
        assert_eq!(
            ddl,
            "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT>, coupon STRING"
        );
        assert_eq!(added, ["meta.ver", "coupon"]);
        assert_eq!(files, ["/l/b.json", "/l/c.json"]);
        assert_eq!(
            reason,
            "new fields meta.ver BIGINT, coupon STRING (in /l/b.json, /l/c.json)"
        );
    }

    #[test]
    fn each_mode() {
        let current = parse_ddl("id BIGINT").unwrap();
        let fields = [nf(&["x"], "DOUBLE", "/l/a.json")];
        assert_eq!(
            evolve(&current, &fields, EvolutionMode::Rescue),
            Decision::Unchanged
        );
        assert_eq!(
            evolve(&current, &fields, EvolutionMode::None),
            Decision::Unchanged
        );
        let Decision::Fail { message } = evolve(&current, &fields, EvolutionMode::FailOnNewColumns)
        else {
            panic!()
        };
        assert!(
            message.contains("x DOUBLE (in /l/a.json)") && message.contains("fail_on_new_columns"),
            "{message}"
        );
        // The reader's own column names are never added.
        let reserved = [
            nf(&["_rescued_data"], "STRING", "/l/a.json"),
            nf(&["_metadata"], "STRUCT<file_path: STRING>", "/l/a.json"),
        ];
        assert_eq!(
            evolve(&current, &reserved, EvolutionMode::AddNewColumns),
            Decision::Unchanged
        );
        // Nothing new: unchanged in every mode.
        for mode in [
            EvolutionMode::AddNewColumns,
            EvolutionMode::Rescue,
            EvolutionMode::FailOnNewColumns,
            EvolutionMode::None,
        ] {
            assert_eq!(evolve(&current, &[], mode), Decision::Unchanged);
        }
    }

    #[test]
    fn null_only_fields_wait_for_a_typed_value_b06() {
        let current = parse_ddl("id BIGINT, amount BIGINT").unwrap();
        let null_only = [nf(&["coupon"], "NULL", "/l/t2.json")];
        for mode in [
            EvolutionMode::AddNewColumns,
            EvolutionMode::FailOnNewColumns,
        ] {
            assert_eq!(evolve(&current, &null_only, mode), Decision::Unchanged);
        }
        // Null in one file, typed in the next: added with the type.
        let (ddl, added, files, _) = widen(
            "id BIGINT, amount BIGINT",
            &[
                nf(&["coupon"], "NULL", "/l/t2.json"),
                nf(&["coupon"], "STRING", "/l/t3.json"),
            ],
        );
        assert_eq!(ddl, "id BIGINT, amount BIGINT, coupon STRING");
        assert_eq!(added, ["coupon"]);
        assert_eq!(files, ["/l/t3.json"]);
    }

    #[test]
    fn case_variants_are_never_added_b02() {
        let current = parse_ddl("id BIGINT, Photo STRING").unwrap();
        assert_eq!(
            evolve(
                &current,
                &[nf(&["photo"], "STRING", "/l/b.json")],
                EvolutionMode::AddNewColumns
            ),
            Decision::Unchanged
        );
        // Between two new spellings the first reported wins.
        let (ddl, added, _, _) = widen(
            "Code STRING",
            &[
                nf(&["Qty"], "BIGINT", "/l/d.json"),
                nf(&["qty"], "BIGINT", "/l/d.json"),
            ],
        );
        assert_eq!(ddl, "Code STRING, Qty BIGINT");
        assert_eq!(added, ["Qty"]);
        // Nested: a case variant of a struct's field.
        assert_eq!(
            evolve(
                &parse_ddl("meta STRUCT<Src: STRING>").unwrap(),
                &[nf(&["meta", "src"], "STRING", "/l/a.json")],
                EvolutionMode::AddNewColumns
            ),
            Decision::Unchanged
        );
    }

    #[test]
    fn types_merge_across_files_and_existing_fields_are_ignored() {
        let (ddl, _, files, _) = widen(
            "id BIGINT",
            &[
                nf(&["id"], "STRING", "/l/a.json"),
                nf(&["x"], "BIGINT", "/l/a.json"),
                nf(&["x"], "DOUBLE", "/l/b.json"),
                nf(&["y"], "BIGINT", "/l/a.json"),
                nf(&["y"], "STRING", "/l/b.json"),
            ],
        );
        assert_eq!(ddl, "id BIGINT, x DOUBLE, y STRING");
        assert_eq!(files, ["/l/a.json"]);
    }

    #[test]
    fn dotted_names_are_one_column_not_a_path_b03() {
        let (ddl, added, _, _) = widen(
            "geo STRUCT<lat: STRING>",
            &[
                nf(&["geo.lat"], "STRING", "/l/n.json"),
                nf(&["geo", "lon"], "DOUBLE", "/l/n.json"),
                nf(&["order id"], "BIGINT", "/l/n.json"),
            ],
        );
        assert_eq!(
            ddl,
            "geo STRUCT<lat: STRING, lon: DOUBLE>, `geo.lat` STRING, `order id` BIGINT"
        );
        assert_eq!(added, ["`geo.lat`", "geo.lon", "`order id`"]);
    }

    #[test]
    fn nested_fields_need_a_struct_parent() {
        let current =
            parse_ddl("s STRING, items ARRAY<STRUCT<a: BIGINT>>, m MAP<STRING, STRUCT<k: STRING>>")
                .unwrap();
        // Under a string: a type mismatch, not a new field. Under a missing parent: the
        // decoder reports the parent itself.
        assert!(
            additions(
                &current,
                &[
                    nf(&["s", "x"], "BIGINT", "/f"),
                    nf(&["nope", "x"], "BIGINT", "/f")
                ]
            )
            .is_empty()
        );
        let (ddl, added, _, _) = widen(
            "s STRING, items ARRAY<STRUCT<a: BIGINT>>, m MAP<STRING, STRUCT<k: STRING>>",
            &[
                nf(&["items", "element", "b"], "STRING", "/f"),
                nf(&["m", "value", "j"], "BIGINT", "/f"),
            ],
        );
        assert_eq!(
            ddl,
            "s STRING, items ARRAY<STRUCT<a: BIGINT, b: STRING>>, \
             m MAP<STRING, STRUCT<k: STRING, j: BIGINT>>"
        );
        assert_eq!(added, ["items.element.b", "m.value.j"]);
        assert_eq!(
            type_at(
                &parse_ddl(&ddl).unwrap(),
                &["m".into(), "value".into(), "j".into()]
            ),
            Some(&DataType::Int64)
        );
    }

    #[test]
    fn strings_only_and_mode_names() {
        let fields = strings_only(&[
            nf(&["a"], "BIGINT", "/f"),
            nf(&["b"], "NULL", "/f"),
            nf(&["c"], "STRUCT<x: BIGINT>", "/f"),
        ]);
        let types: Vec<_> = fields.iter().map(|f| f.data_type.clone()).collect();
        assert_eq!(types, [DataType::Utf8, DataType::Null, DataType::Utf8]);
        for mode in [
            EvolutionMode::AddNewColumns,
            EvolutionMode::Rescue,
            EvolutionMode::FailOnNewColumns,
            EvolutionMode::None,
        ] {
            assert_eq!(mode.as_str().parse::<EvolutionMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{mode}\""));
            assert_eq!(serde_json::from_str::<EvolutionMode>(&json).unwrap(), mode);
        }
        assert_eq!(
            "addNewColumns".parse::<EvolutionMode>(),
            Ok(EvolutionMode::AddNewColumns)
        );
        let err = "sometimes".parse::<EvolutionMode>().unwrap_err();
        assert!(err.contains("add_new_columns"), "{err}");
        assert_eq!(
            EvolutionMode::default_for(false),
            EvolutionMode::AddNewColumns
        );
        assert_eq!(EvolutionMode::default_for(true), EvolutionMode::None);
    }
}
