//! Schema hints (Auto Loader's `cloudFiles.schemaHints`): pin the types of some
//! columns while the rest is inferred.
//!
//! ```text
//! schema_hints = "amount DECIMAL(12,2), ts TIMESTAMP, meta.ver BIGINT, `order id` STRING"
//! ```
//!
//! The grammar is the DDL of [`crate::schema::ddl`] with one addition: a column
//! name may be a dotted **path** into structs (`meta.ver`); a name with a dot in it
//! is back-quoted (`` `geo.lat` `` is the column named `geo.lat`). `element` steps
//! into an array's items and `value` into a map's values (`items.element.qty INT`).
//!
//! Rules, applied to the inferred schema hint by hint, in order:
//!
//! - a hinted column that was inferred gets the hinted type, keeping its place and
//!   the inferred spelling; names match exactly, or else ignoring case (Delta is
//!   case-insensitive, so `AMOUNT` pins the inferred `amount` instead of adding a
//!   second column);
//! - a hinted column that was not inferred is appended (at the end of its struct
//!   for a nested path; missing parent structs are created);
//! - a hinted type replaces the inferred one whole (`meta STRUCT<a: INT>` drops the
//!   other inferred fields of `meta`; hint `meta.a` to pin only `a`);
//! - a path through a column that is not a struct (or array / map for
//!   `element` / `value`) is an error, and so is the same path hinted twice.
//!
//! Values that do not fit a hinted type are rescued like any other mismatch.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema};

use super::SchemaError;
use super::ddl::{parse_ddl, type_to_ddl};
use super::evolve::path_to_string;

/// One parsed hint: where, and the field (named after the last path element) to put there.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    pub path: Vec<String>,
    pub field: Field,
}

/// Applies `hints_ddl` to an inferred schema (see the module documentation).
pub fn apply_hints(inferred: Schema, hints_ddl: &str) -> Result<Schema, SchemaError> {
    let hints = parse_hints(hints_ddl)?;
    let metadata = inferred.metadata().clone();
    let mut fields = inferred.fields().clone();
    for hint in &hints {
        fields = apply(&fields, &hint.path, &hint.field).map_err(|message| SchemaError::Hint {
            hint: path_to_string(&hint.path),
            message,
        })?;
    }
    Ok(Schema::new_with_metadata(fields, metadata))
}

/// Parses a hints string into its hints, in order.
pub fn parse_hints(hints_ddl: &str) -> Result<Vec<Hint>, SchemaError> {
    let mut hints: Vec<Hint> = Vec::new();
    for (start, end) in split_entries(hints_ddl)? {
        let entry = &hints_ddl[start..end];
        if entry.trim().is_empty() {
            return Err(SchemaError::Ddl {
                position: start,
                column: None,
                message: if hints_ddl.trim().is_empty() {
                    "the schema hints are empty; expected `name TYPE, ...`".into()
                } else {
                    "expected a hint (`name TYPE`) around `,`".into()
                },
            });
        }
        let (path, type_at) = parse_path(hints_ddl, start, end)?;
        let column = path_to_string(&path);
        let type_text = &hints_ddl[type_at..end];
        // Parse `<type> [NOT NULL] [COMMENT '...']` with the DDL parser, under a placeholder name.
        const PREFIX: &str = "h ";
        let parsed = parse_ddl(&format!("{PREFIX}{type_text}")).map_err(|e| match e {
            SchemaError::Ddl {
                position, message, ..
            } => SchemaError::Ddl {
                position: type_at + position.saturating_sub(PREFIX.len()),
                column: Some(column.clone()),
                message,
            },
            other => other,
        })?;
        let Some(hinted) = parsed.fields().first() else {
            return Err(SchemaError::Ddl {
                position: type_at,
                column: Some(column),
                message: "expected a type".into(),
            });
        };
        let name = path.last().cloned().unwrap_or_default();
        let field = hinted.as_ref().clone().with_name(name);
        let folded: Vec<String> = path.iter().map(|s| s.to_lowercase()).collect();
        if hints.iter().any(|h| {
            h.path
                .iter()
                .map(|s| s.to_lowercase())
                .eq(folded.iter().cloned())
        }) {
            return Err(SchemaError::Hint {
                hint: column,
                message: "hinted more than once".into(),
            });
        }
        hints.push(Hint { path, field });
    }
    Ok(hints)
}

/// Byte ranges of the comma-separated entries (commas inside `<>`, `()`, quotes
/// and back-quotes do not separate).
fn split_entries(text: &str) -> Result<Vec<(usize, usize)>, SchemaError> {
    let mut entries = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            '`' | '\'' | '"' => {
                let mut closed = false;
                while let Some((_, d)) = chars.next() {
                    if c != '`' && d == '\\' {
                        chars.next();
                    } else if d == c {
                        if c == '`' && matches!(chars.peek(), Some((_, '`'))) {
                            chars.next();
                        } else {
                            closed = true;
                            break;
                        }
                    }
                }
                if !closed {
                    return Err(SchemaError::Ddl {
                        position: at,
                        column: None,
                        message: format!("unterminated {c}"),
                    });
                }
            }
            ',' if depth == 0 => {
                entries.push((start, at));
                start = at + 1;
            }
            _ => {}
        }
    }
    entries.push((start, text.len()));
    Ok(entries)
}

/// The path at the start of `text[start..end]`, and where the type begins.
fn parse_path(text: &str, start: usize, end: usize) -> Result<(Vec<String>, usize), SchemaError> {
    let bytes = text.as_bytes();
    let mut at = start;
    let skip_ws = |mut at: usize| {
        while at < end && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    };
    let mut path = Vec::new();
    loop {
        at = skip_ws(at);
        let name_at = at;
        let mut name = String::new();
        if text[at..end].starts_with('`') {
            at += 1;
            let mut closed = false;
            let mut chars = text[at..end].char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                if c == '`' {
                    if matches!(chars.peek(), Some((_, '`'))) {
                        chars.next();
                        name.push('`');
                        continue;
                    }
                    at += i + 1;
                    closed = true;
                    break;
                }
                name.push(c);
            }
            if !closed {
                return Err(SchemaError::Ddl {
                    position: name_at,
                    column: None,
                    message: "unterminated back-quoted name".into(),
                });
            }
        } else {
            for (i, c) in text[at..end].char_indices() {
                if c.is_alphanumeric() || c == '_' {
                    name.push(c);
                } else {
                    at += i;
                    break;
                }
            }
            if name.is_empty() {
                return Err(SchemaError::Ddl {
                    position: name_at,
                    column: None,
                    message: "expected a column name (back-quote names with other characters)"
                        .into(),
                });
            }
            if text[name_at..end].len() == name.len() {
                at = end;
            }
        }
        path.push(name);
        if at < end && bytes[at] == b'.' {
            at += 1;
            continue;
        }
        return Ok((path, at));
    }
}

/// `fields` with the hint applied at `path`.
fn apply(fields: &Fields, path: &[String], hint: &Field) -> Result<Fields, String> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(fields.clone());
    };
    let index = fields.iter().position(|f| f.name() == first).or_else(|| {
        let folded = first.to_lowercase();
        fields
            .iter()
            .position(|f| f.name().to_lowercase() == folded)
    });
    let mut out: Vec<FieldRef> = fields.iter().cloned().collect();
    match index {
        Some(i) => {
            let current = &fields[i];
            let data_type = if rest.is_empty() {
                hint.data_type().clone()
            } else {
                apply_below(current.name(), current.data_type(), rest, hint)?
            };
            let mut field = current.as_ref().clone().with_data_type(data_type);
            if rest.is_empty() && !hint.metadata().is_empty() {
                let mut metadata = field.metadata().clone();
                metadata.extend(hint.metadata().clone());
                field.set_metadata(metadata);
            }
            out[i] = Arc::new(field.with_nullable(true));
        }
        None => {
            let data_type = if rest.is_empty() {
                hint.data_type().clone()
            } else {
                DataType::Struct(apply(&Fields::empty(), rest, hint)?)
            };
            let mut field = Field::new(first, data_type, true);
            if rest.is_empty() {
                field.set_metadata(hint.metadata().clone());
            }
            out.push(Arc::new(field));
        }
    }
    Ok(Fields::from(out))
}

fn apply_below(
    name: &str,
    data_type: &DataType,
    path: &[String],
    hint: &Field,
) -> Result<DataType, String> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(hint.data_type().clone());
    };
    let with_item = |item: &FieldRef| -> Result<FieldRef, String> {
        let inner = if rest.is_empty() {
            hint.data_type().clone()
        } else {
            apply_below(first, item.data_type(), rest, hint)?
        };
        Ok(Arc::new(item.as_ref().clone().with_data_type(inner)))
    };
    match data_type {
        DataType::Struct(fields) => Ok(DataType::Struct(apply(fields, path, hint)?)),
        DataType::List(item) if first == "element" => Ok(DataType::List(with_item(item)?)),
        DataType::LargeList(item) if first == "element" => {
            Ok(DataType::LargeList(with_item(item)?))
        }
        DataType::Map(entries, sorted) if first == "value" => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                let kv = Fields::from(vec![Arc::clone(&kv[0]), with_item(&kv[1])?]);
                Ok(DataType::Map(
                    Arc::new(
                        entries
                            .as_ref()
                            .clone()
                            .with_data_type(DataType::Struct(kv)),
                    ),
                    *sorted,
                ))
            }
            _ => Err(format!("`{name}` is not a map with values")),
        },
        other => Err(format!(
            "`{name}` is {}, not a struct{}, so `{first}` cannot be inside it",
            type_to_ddl(other),
            match other {
                DataType::List(_) | DataType::LargeList(_) => " (use `element` for its items)",
                DataType::Map(..) => " (use `value` for its values)",
                _ => "",
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ddl::COMMENT_KEY;
    use crate::schema::{parse_ddl, to_ddl};

    fn hinted(inferred: &str, hints: &str) -> Result<String, SchemaError> {
        apply_hints(parse_ddl(inferred).unwrap(), hints).map(|s| to_ddl(&s))
    }

    #[test]
    fn pins_types_in_place_and_adds_missing_columns() {
        assert_eq!(
            hinted(
                "id BIGINT, amount DOUBLE, ts STRING",
                "amount DECIMAL(12,2), ts TIMESTAMP, note STRING"
            )
            .unwrap(),
            "id BIGINT, amount DECIMAL(12,2), ts TIMESTAMP, note STRING"
        );
    }

    #[test]
    fn nested_paths_pin_or_add_struct_fields() {
        assert_eq!(
            hinted(
                "id BIGINT, meta STRUCT<src: STRING, ver: STRING>",
                "meta.ver BIGINT, meta.extra.deep DATE, other.x INT"
            )
            .unwrap(),
            "id BIGINT, meta STRUCT<src: STRING, ver: BIGINT, extra: STRUCT<deep: DATE>>, \
             other STRUCT<x: INT>"
        );
        assert_eq!(
            hinted(
                "items ARRAY<STRUCT<qty: STRING>>, m MAP<STRING, STRUCT<a: STRING>>",
                "items.element.qty INT, m.value.a BIGINT"
            )
            .unwrap(),
            "items ARRAY<STRUCT<qty: INT>>, m MAP<STRING, STRUCT<a: BIGINT>>"
        );
        // A whole-struct hint replaces the inferred struct.
        assert_eq!(
            hinted(
                "meta STRUCT<src: STRING, ver: BIGINT>",
                "meta STRUCT<src: STRING>"
            )
            .unwrap(),
            "meta STRUCT<src: STRING>"
        );
    }

    #[test]
    fn dotted_and_odd_names_are_back_quoted() {
        assert_eq!(
            hinted(
                "`geo.lat` STRING, geo STRUCT<lat: STRING>, `order id` BIGINT",
                "`geo.lat` DOUBLE, geo.lat DOUBLE, `order id` INT, `k=v` STRING, `a``b`.c INT"
            )
            .unwrap(),
            "`geo.lat` DOUBLE, geo STRUCT<lat: DOUBLE>, `order id` INT, `k=v` STRING, \
             `a``b` STRUCT<c: INT>"
        );
    }

    #[test]
    fn names_match_ignoring_case_and_keep_the_inferred_spelling() {
        assert_eq!(
            hinted(
                "Amount DOUBLE, Meta STRUCT<Ver: STRING>",
                "AMOUNT DECIMAL(10,2), meta.ver INT"
            )
            .unwrap(),
            "Amount DECIMAL(10,2), Meta STRUCT<Ver: INT>"
        );
    }

    #[test]
    fn comments_and_complex_types() {
        let schema = apply_hints(
            parse_ddl("a STRING").unwrap(),
            "a STRING NOT NULL COMMENT 'x, y', s STRUCT<p: INT, q: ARRAY<DECIMAL(5,2)>>",
        )
        .unwrap();
        assert_eq!(
            schema
                .field(0)
                .metadata()
                .get(COMMENT_KEY)
                .map(String::as_str),
            Some("x, y")
        );
        assert!(schema.field(0).is_nullable());
        assert_eq!(
            to_ddl(&schema),
            "a STRING COMMENT 'x, y', s STRUCT<p: INT, q: ARRAY<DECIMAL(5,2)>>"
        );
    }

    #[test]
    fn errors_name_the_hint_and_position() {
        let err = hinted("id BIGINT", "id BIGINT, amount DECIMALL(12,2)").unwrap_err();
        match &err {
            SchemaError::Ddl {
                position,
                column,
                message,
            } => {
                assert_eq!(*position, 18, "{err}");
                assert_eq!(column.as_deref(), Some("amount"));
                assert!(message.contains("DECIMALL"), "{message}");
            }
            other => panic!("{other}"),
        }
        let err = hinted("s STRING", "s.x INT").unwrap_err();
        assert!(
            matches!(&err, SchemaError::Hint { hint, message } if hint == "s.x" && message.contains("`s` is STRING, not a struct")),
            "{err}"
        );
        let err = hinted("l ARRAY<INT>", "l.x INT").unwrap_err();
        assert!(err.to_string().contains("use `element`"), "{err}");
        let err = hinted("a INT", "a INT, A BIGINT").unwrap_err();
        assert!(
            matches!(&err, SchemaError::Hint { message, .. } if message.contains("more than once")),
            "{err}"
        );
        for bad in [
            "", " ", "a", "a INT,", ",a INT", "a INT b", "`a INT", "a.", "a-b INT",
        ] {
            assert!(hinted("x INT", bad).is_err(), "{bad:?} should fail");
        }
        assert!(!err.retryable());
    }
}
